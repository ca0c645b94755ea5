"""Why is this job waiting? (django_outbox/waiting.py and the job's admin page)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.test.utils import override_settings
from django.utils import timezone

from django_outbox import ratelimits, workflows
from django_outbox.jobs import ratekeys
from django_outbox.models import Job, JobStatus, LimitKey, QueueState
from django_outbox.waiting import reasons
from tests.factories import JobFactory, WorkerFactory
from tests.tasks import double, in_sequence, per_customer

pytestmark = pytest.mark.django_db


def codes(job: Job) -> list[str]:
    job.refresh_from_db()
    return [reason.code for reason in reasons(job)]


@pytest.fixture
def live_worker() -> None:
    WorkerFactory(queues=["default", "slow", "limited", "rated"])


def test_a_due_job_with_no_live_worker_says_so_and_with_one_says_it_is_due() -> None:
    job = JobFactory()
    (reason,) = reasons(job)
    assert reason.code == "no_worker"
    assert "manage.py runworker --queues default" in reason.text
    WorkerFactory(queues=["emails"])  # a worker for another queue does not count
    assert codes(job) == ["no_worker"]
    WorkerFactory(queues=["default"], heartbeat_at=timezone.now() - timedelta(hours=1))
    assert codes(job) == ["no_worker"]  # nor one gone silent
    WorkerFactory(queues=["default"])
    assert codes(job) == ["due"]


@pytest.mark.usefixtures("live_worker")
def test_a_job_not_due_yet_and_a_retry_after_its_backoff_say_until_when() -> None:
    later = timezone.now() + timedelta(minutes=5)
    job = JobFactory(run_at=later)
    (reason,) = reasons(job)
    assert (reason.code, reason.text, reason.until) == ("not_due", "Not due yet.", later)
    retry = JobFactory(run_at=later, attempts=1, errors=[{"exception_class_path": "x"}])
    (reason,) = reasons(retry)
    assert reason.text == "Attempt 1 failed: it is retried after its backoff."


@pytest.mark.usefixtures("live_worker")
def test_a_held_job_names_the_jobs_holding_its_key() -> None:
    for n in range(3):
        per_customer.enqueue(1, n)
    first, second, held = Job.objects.order_by("id")
    (reason,) = reasons(held)
    assert reason.code == "key_busy"
    assert "concurrency key 'customer-1' has its limit of 2" in reason.text
    assert reason.job_ids == (first.pk, second.pk)
    assert codes(first) == ["due"]


@pytest.mark.usefixtures("live_worker")
def test_a_sequence_held_by_a_failed_job_names_it() -> None:
    for n in range(2):
        in_sequence.enqueue(1, n)
    first, second = Job.objects.order_by("id")
    assert reasons(second)[0].job_ids == (first.pk,)
    Job.objects.filter(pk=first.pk).update(status=JobStatus.FAILED)
    LimitKey.objects.filter(key="sequence:order-1").update(held_by=first.pk)
    (reason,) = reasons(second)
    assert reason.code == "sequence_held"
    assert reason.job_ids == (first.pk,)
    assert "retry it or skip it" in reason.text


@pytest.mark.usefixtures("live_worker")
def test_a_paused_queue_a_full_queue_and_a_rate_limited_queue_say_so() -> None:
    job = JobFactory(queue="limited")
    QueueState.objects.create(name="limited", paused_at=timezone.now())
    assert codes(job) == ["queue_paused"]
    QueueState.objects.filter(name="limited").update(paused_at=None)
    assert codes(job) == ["due"]
    queues = {"limited": {"concurrency": 1}, "rated": {"rate": 0.5, "burst": 1}}
    with override_settings(
        OUTBOX=settings.OUTBOX | {"QUEUES": queues, "RATE_LIMIT_STORE": "database"}
    ):
        JobFactory(queue="limited", running=True)
        (reason,) = reasons(job)
        assert reason.code == "queue_full"
        assert "at most 1 job(s) at once, and 1 are running" in reason.text
        rated = JobFactory(queue="rated")
        assert codes(rated) == ["due"]
        rate = ratelimits.Rate.of(0.5, 1)
        assert ratelimits.take("queue:rated", rate, 1).granted == 1
        (reason,) = reasons(rated)
        assert reason.code == "queue_rate"
        assert reason.until is not None and reason.until > timezone.now()


@pytest.mark.usefixtures("live_worker")
def test_a_run_held_back_by_its_rate_key_says_so() -> None:
    later = timezone.now() + timedelta(seconds=3)
    job = JobFactory(
        run_at=later,
        attempts=0,
        kwargs={ratekeys.TURN: {"at": time.time() + 3, "attempt": 1}},
    )
    (reason,) = reasons(job)
    assert (reason.code, reason.until) == ("rate_limited", later)


@pytest.mark.usefixtures("live_worker")
def test_a_waiting_workflow_step_names_the_steps_it_waits_for() -> None:
    run = workflows.chain(workflows.step(double, 1), workflows.step(double)).enqueue()
    first, second = Job.objects.filter(workflow_id=run.id).order_by("id")
    (reason,) = reasons(second)
    assert (reason.code, reason.job_ids) == ("upstream", (first.pk,))


def test_a_running_or_finished_job_has_no_reasons() -> None:
    assert reasons(JobFactory(running=True)) == []
    assert reasons(JobFactory(status=JobStatus.SUCCEEDED)) == []


@pytest.mark.usefixtures("live_worker")
def test_the_jobs_page_shows_why_it_waits_with_links_to_the_jobs_holding_it(admin_client) -> None:
    for n in range(3):
        per_customer.enqueue(1, n)
    first, _second, held = Job.objects.order_by("id")
    page = admin_client.get(f"/admin/django_outbox/job/{held.pk}/change/").content.decode()
    assert "Why is it waiting?" in page
    assert 'data-reason="key_busy"' in page
    assert f'href="/admin/django_outbox/job/{first.pk}/change/"' in page
    assert "concurrency key &#x27;customer-1&#x27;" in page
    done = JobFactory(status=JobStatus.SUCCEEDED)
    page = admin_client.get(f"/admin/django_outbox/job/{done.pk}/change/").content.decode()
    assert "Why is it waiting?" not in page


def _reason_on_page(admin_client, job: Job) -> str:
    page = admin_client.get(f"/admin/django_outbox/job/{job.pk}/change/").content.decode()
    assert "Why is it waiting?" in page
    return page


@pytest.mark.usefixtures("live_worker")
def test_the_jobs_page_says_until_when_for_every_reason_bound_to_a_time(admin_client) -> None:
    """A scheduled job, a retry in its backoff, a rate key's turn, a queue at its rate."""
    later = timezone.now() + timedelta(minutes=5)
    until = f"Until {timezone.localtime(later):%Y-%m-%d %H:%M:%S} (in "
    scheduled = JobFactory(run_at=later)
    retry = JobFactory(run_at=later, attempts=1, errors=[{"exception_class_path": "x"}])
    turn = JobFactory(run_at=later, kwargs={ratekeys.TURN: {"at": later.timestamp(), "attempt": 1}})
    for job, code, text in (
        (scheduled, "not_due", "Not due yet."),
        (retry, "not_due", "Attempt 1 failed: it is retried after its backoff."),
        (turn, "rate_limited", "Its rate key is at its limit"),
    ):
        page = _reason_on_page(admin_client, job)
        assert f'<li data-reason="{code}">{text}' in page, page
        assert until in page, page
    queues = {"rated": {"rate": 0.5, "burst": 1}}
    with override_settings(
        OUTBOX=settings.OUTBOX | {"QUEUES": queues, "RATE_LIMIT_STORE": "database"}
    ):
        rated = JobFactory(queue="rated")
        assert ratelimits.take("queue:rated", ratelimits.Rate.of(0.5, 1), 1).granted == 1
        page = _reason_on_page(admin_client, rated)
        assert '<li data-reason="queue_rate">Its queue &#x27;rated&#x27; is at its rate' in page
        assert re.search(r"Until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(in [^)]+\)\.", page), page


def test_the_jobs_page_shows_every_reason_without_a_time(admin_client) -> None:
    unserved = JobFactory(queue="nobody")
    assert '<li data-reason="no_worker">No live worker serves' in _reason_on_page(
        admin_client, unserved
    )
    WorkerFactory(queues=["default", "paused"])
    assert '<li data-reason="due">Due now' in _reason_on_page(admin_client, JobFactory())
    paused = JobFactory(queue="paused")
    QueueState.objects.create(name="paused", paused_at=timezone.now())
    assert '<li data-reason="queue_paused">' in _reason_on_page(admin_client, paused)
    run = workflows.chain(workflows.step(double, 1), workflows.step(double)).enqueue()
    first, second = Job.objects.filter(workflow_id=run.id).order_by("id")
    page = _reason_on_page(admin_client, second)
    assert '<li data-reason="upstream">' in page
    assert f'href="/admin/django_outbox/job/{first.pk}/change/"' in page
    for n in range(2):
        in_sequence.enqueue(3, n)
    failed, held = Job.objects.filter(limit_key="sequence:order-3").order_by("id")
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)
    LimitKey.objects.filter(key="sequence:order-3").update(held_by=failed.pk)
    page = _reason_on_page(admin_client, held)
    assert '<li data-reason="sequence_held">' in page and "retry it or skip it" in page


@pytest.mark.django_db(transaction=True)
def test_the_skip_action_lets_a_held_sequence_go_on(admin_client) -> None:
    for n in range(2):
        in_sequence.enqueue(2, n)
    first, second = Job.objects.order_by("id")
    Job.objects.filter(pk=first.pk).update(status=JobStatus.FAILED)
    LimitKey.objects.filter(key="sequence:order-2").update(held_by=first.pk)
    response = admin_client.post(
        "/admin/django_outbox/job/",
        {"action": "skip", "_selected_action": [first.pk]},
        follow=True,
    )
    assert "Sequences let go on: 1" in response.content.decode()
    second.refresh_from_db()
    assert second.status == JobStatus.QUEUED


def _held_sequence(number: int) -> tuple[Job, Job, Job]:
    """Three jobs of a sequence, the first failed for good and holding it."""
    for n in range(3):
        in_sequence.enqueue(number, n)
    first, second, third = Job.objects.filter(limit_key=f"sequence:order-{number}").order_by("id")
    Job.objects.filter(pk=first.pk).update(status=JobStatus.FAILED, finished_at=timezone.now())
    LimitKey.objects.filter(key=f"sequence:order-{number}").update(held_by=first.pk)
    first.refresh_from_db()
    return first, second, third


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def skip_url(job: Job) -> str:
    return f"/admin/django_outbox/job/{job.pk}/skip/"


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_holding_its_sequence_says_so_on_its_page_and_skips_with_a_button(
    admin_client,
) -> None:
    failed, second, third = _held_sequence(4)
    page = admin_client.get(f"/admin/django_outbox/job/{failed.pk}/change/").content.decode()
    assert "What it holds back" in page and "Why is it waiting?" not in page
    assert '<li data-reason="holds_sequence">It holds its sequence &#x27;order-4&#x27;' in page
    for waiting_job in (second, third):
        assert f'href="/admin/django_outbox/job/{waiting_job.pk}/change/"' in page
    assert 'name="_skip" value="Skip"' in page and f'formaction="{skip_url(failed)}"' in page
    response = admin_client.post(skip_url(failed), follow=True)
    assert response.redirect_chain == [(f"/admin/django_outbox/job/{failed.pk}/change/", 302)]
    assert messages_of(response) == [f"The sequence 'order-4' goes on without job #{failed.pk}."]
    second.refresh_from_db()
    assert second.status == JobStatus.QUEUED  # the next one's turn
    assert LimitKey.objects.get(key="sequence:order-4").held_by is None
    page = response.content.decode()
    assert "What it holds back" not in page and 'name="_skip"' not in page


@pytest.mark.django_db(transaction=True)
def test_a_job_its_sequence_holds_back_skips_the_failed_one_from_its_own_page(
    admin_client,
) -> None:
    failed, second, _third = _held_sequence(5)
    page = admin_client.get(f"/admin/django_outbox/job/{second.pk}/change/").content.decode()
    assert 'data-reason="sequence_held"' in page
    assert f'formaction="{skip_url(second)}"' in page
    response = admin_client.post(skip_url(second), follow=True)
    assert messages_of(response) == [f"The sequence 'order-5' goes on without job #{failed.pk}."]
    second.refresh_from_db()
    assert second.status == JobStatus.QUEUED
    failed.refresh_from_db()
    assert failed.status == JobStatus.FAILED  # skipped, not run again


@pytest.mark.django_db(transaction=True)
def test_the_skip_button_needs_a_post_and_the_change_permission_and_says_when_it_did_nothing(
    client, admin_client
) -> None:
    from django.contrib.auth.models import Permission, User

    failed, second, _third = _held_sequence(6)
    assert admin_client.get(skip_url(failed)).status_code == 405
    viewer = User.objects.create_user("watcher", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    page = client.get(f"/admin/django_outbox/job/{failed.pk}/change/").content.decode()
    assert "What it holds back" in page and 'name="_skip"' not in page
    assert client.post(skip_url(failed)).status_code == 403
    assert LimitKey.objects.get(key="sequence:order-6").held_by == failed.pk
    unkeyed = JobFactory()
    response = admin_client.post(skip_url(unkeyed), follow=True)
    assert messages_of(response) == [
        f"Job #{unkeyed.pk} was left as it was: no failed job holds its sequence now."
    ]
    assert admin_client.post("/admin/django_outbox/job/999999/skip/").status_code == 404
    second.refresh_from_db()
    assert second.status == JobStatus.HELD
