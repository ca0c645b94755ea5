"""Secrets stay secret, and a rotated-out secret stops working.

The rest of the security checks live beside what they guard: the SSRF guard and DNS
rebinding in test_webhooks_delivery.py, verify() and replays in test_signing.py, URL
refusals in test_bad_input.py, admin permissions and the staff-only dashboard in
test_admin.py.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from django_outbox import webhooks
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Endpoint, Job, Message
from django_outbox.webhooks.signing import VerificationError
from tests.conftest import wait_until
from tests.receiver import Answer

pytestmark = pytest.mark.django_db(transaction=True)


def _settled(message: Message) -> list[Delivery]:
    def done() -> list[Delivery] | None:
        rows = list(Delivery.objects.filter(message=message))
        return rows if all(d.status != DeliveryStatus.PENDING for d in rows) else None

    return wait_until(done, timeout=20, what="the deliveries to settle")


def test_secrets_never_reach_logs_attempts_jobs_or_admin_pages(
    receiver, webhook_worker, client, caplog
):
    caplog.set_level(logging.DEBUG)
    failing = webhooks.create_endpoint(receiver.url("/fails"))  # always 500: exhausted
    flaky = webhooks.create_endpoint(receiver.url("/flaky"))  # 500, then 200
    receiver.script("/fails", Answer(500, body=b"nope"))
    receiver.script("/flaky", Answer(500, body=b"later"), Answer(200))
    previous = flaky.secret
    webhooks.rotate_secret(flaky)  # two secrets sign its requests
    flaky.refresh_from_db()
    secrets = {failing.secret, flaky.secret, previous}
    message = webhooks.send("invoice.paid", {"id": 7})
    webhook_worker()
    deliveries = _settled(message)
    assert {d.status for d in deliveries} == {DeliveryStatus.FAILED, DeliveryStatus.SUCCEEDED}
    assert receiver.at("/flaky")[-1].headers["webhook-signature"].count("v1,") == 2

    staff = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(staff)
    pages = [
        f"/admin/django_outbox/{model}/" for model in ("endpoint", "message", "delivery", "attempt")
    ]
    pages += [f"/admin/django_outbox/endpoint/{e.pk}/change/" for e in (failing, flaky)]
    pages += [f"/admin/django_outbox/delivery/{d.pk}/change/" for d in deliveries]
    pages += [f"/admin/django_outbox/attempt/{a.pk}/change/" for a in Attempt.objects.all()]
    pages += ["/admin/django_outbox/job/", "/admin/django_outbox/dashboard/"]
    seen = [caplog.text]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        seen.append(response.content.decode())
    for model in (Attempt, Delivery, Message, Job):
        seen += [repr(row) for row in model.objects.values()]
    everything = "\n".join(seen)
    assert "HTTP 500" in everything and "invoice.paid" in everything  # the places were read
    for secret in secrets:
        key = secret.removeprefix("whsec_")
        assert key not in everything, "a secret leaked"


def test_a_rotated_out_secret_stops_signing_once_its_grace_is_over(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url())
    old = endpoint.secret
    new = webhooks.rotate_secret(endpoint, grace=timedelta(0))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    _settled(message)
    (request,) = receiver.at("/hook")
    assert request.headers["webhook-signature"].count("v1,") == 1
    assert Webhook(new).verify(request.body, request.headers)
    assert webhooks.verify(request.headers, request.body, new)["data"] == {"id": 1}
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(request.body, request.headers)
    with pytest.raises(VerificationError):
        webhooks.verify(request.headers, request.body, old)
    assert Endpoint.objects.get().previous_secret == old  # kept, but no longer signing
