from django.db import models


class Customer(models.Model):
    email = models.EmailField(unique=True)
    welcomed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.email


class Order(models.Model):
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="orders")
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    invoice_number = models.CharField(max_length=40, blank=True)

    def __str__(self) -> str:
        return f"Order {self.pk}"
