import pytest

from tests import tasks

pytestmark = pytest.mark.django_db


def test_staff_see_jobs_in_the_admin(admin_client):
    result = tasks.add.enqueue(1, 2)
    page = admin_client.get("/admin/django_outbox/job/")
    assert page.status_code == 200
    assert "tests.tasks.add" in page.content.decode()
    detail = admin_client.get(f"/admin/django_outbox/job/{result.id}/change/")
    assert detail.status_code == 200
    assert admin_client.get("/admin/django_outbox/worker/").status_code == 200


def test_the_admin_does_not_offer_to_add_jobs(admin_client):
    assert admin_client.get("/admin/django_outbox/job/add/").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_staff_see_webhooks_and_each_deliverys_attempts_but_no_secret(admin_client):
    from datetime import timedelta

    from django.utils import timezone

    from django_outbox import webhooks
    from django_outbox.models import Attempt

    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    message = webhooks.send("invoice.paid", {"id": 1})
    delivery = message.deliveries.get()
    Attempt.objects.create(
        delivery=delivery,
        number=1,
        started_at=timezone.now() - timedelta(seconds=1),
        duration=0.2,
        status_code=503,
        error_class="",
    )
    for path in ("endpoint", "message", "delivery", "attempt"):
        assert admin_client.get(f"/admin/django_outbox/{path}/").status_code == 200
    page = admin_client.get(f"/admin/django_outbox/delivery/{delivery.pk}/change/").content.decode()
    assert "503" in page
    endpoint_page = admin_client.get(f"/admin/django_outbox/endpoint/{endpoint.pk}/change/")
    assert endpoint.secret not in endpoint_page.content.decode()
