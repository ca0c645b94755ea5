"""The demo's tasks: what a small shop hands to the worker."""

from __future__ import annotations

import random
import time

from django.utils import timezone

from django_outbox.compat import task
from testproject.shop.models import Customer, Order


@task(queue_name="emails", max_attempts=5, backoff_base=0.2, backoff_cap=2)
def send_welcome(customer_id: int) -> str:
    """Pretend to send an email; the mail server drops about one in five on the first try."""
    time.sleep(0.002)
    if random.random() < 0.2:
        raise ConnectionError("mail server did not answer")
    customer = Customer.objects.get(pk=customer_id)
    customer.welcomed_at = timezone.now()
    customer.save(update_fields=["welcomed_at"])
    return customer.email


@task(queue_name="reports", max_attempts=3, backoff_base=0.2, backoff_cap=1)
def render_invoice(order_id: int) -> str:
    """Give an order its invoice number; orders over 900 always fail (a known bug)."""
    order = Order.objects.get(pk=order_id)
    if order.amount > 900:
        raise ValueError(f"cannot render an invoice over 900 (order {order_id})")
    order.invoice_number = f"INV-{order_id:06d}"
    order.save(update_fields=["invoice_number"])
    return order.invoice_number
