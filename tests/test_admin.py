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
