"""Views that enqueue jobs inside their own transaction: a rollback enqueues nothing."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from django_outbox import webhooks
from testproject.shop.models import Customer, Order
from testproject.shop.tasks import render_invoice, send_welcome


@csrf_exempt
@require_POST
def signup(request: HttpRequest) -> HttpResponse:
    email = request.POST.get("email", "").strip()
    if not email:
        return JsonResponse({"error": "email is required"}, status=400)
    with transaction.atomic():
        customer, created = Customer.objects.get_or_create(email=email)
        if not created:
            return JsonResponse({"error": "already signed up"}, status=409)
        result = send_welcome.enqueue(customer.pk)
    return JsonResponse({"customer": customer.pk, "job": result.id}, status=201)


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> HttpResponse:
    try:
        amount = Decimal(request.POST.get("amount", ""))
    except InvalidOperation:
        return JsonResponse({"error": "amount must be a number"}, status=400)
    with transaction.atomic():
        customer = Customer.objects.filter(email=request.POST.get("email", "")).first()
        if customer is None:
            return JsonResponse({"error": "unknown customer"}, status=404)
        order = Order.objects.create(customer=customer, amount=amount)
        result = render_invoice.enqueue(order.pk)
        # The customers' servers hear of it too: a webhook, in the same transaction.
        message = webhooks.send(
            "order.placed",
            {"order": order.pk, "email": customer.email, "amount": str(amount)},
            idempotency_key=f"order-placed-{order.pk}",
        )
    return JsonResponse({"order": order.pk, "job": result.id, "webhook": message.uid}, status=201)
