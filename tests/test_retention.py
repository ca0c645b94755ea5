"""Pruning: finished jobs and old webhook messages go, in chunks; live rows never do."""

from __future__ import annotations

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from django_outbox import retention, webhooks
from django_outbox.models import (
    Attempt,
    Delivery,
    DeliveryStatus,
    EndpointHour,
    Job,
    JobStatus,
    Message,
)

pytestmark = pytest.mark.django_db


def job(status: str, finished_days_ago: float | None = None, **fields) -> Job:
    finished = None
    if finished_days_ago is not None:
        finished = timezone.now() - timedelta(days=finished_days_ago)
    return Job.objects.create(task_path="tests.tasks.add", status=status, finished_at=finished)


def old_message(days: float, delivery_status: str = DeliveryStatus.SUCCEEDED) -> Message:
    message = webhooks.send("invoice.paid", {"id": 1})
    created = timezone.now() - timedelta(days=days)
    Message.objects.filter(pk=message.pk).update(created_at=created)
    for delivery in message.deliveries.all():
        Delivery.objects.filter(pk=delivery.pk).update(status=delivery_status)
        for number in (1, 2):
            delivery.attempt_log.create(number=number, started_at=created, duration=0.1)
    return message


def prune(*args: str) -> str:
    out = StringIO()
    call_command("outbox_prune", *args, stdout=out)
    return out.getvalue()


def test_finished_jobs_older_than_the_age_go_and_nothing_else():
    old = [job(s, 10) for s in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)]
    recent = job(JobStatus.SUCCEEDED, 1)
    live = [job(JobStatus.QUEUED), job(JobStatus.RUNNING)]
    output = prune("--older-than", "7d")
    assert "3 jobs" in output
    assert not Job.objects.filter(pk__in=[j.pk for j in old]).exists()
    assert set(Job.objects.values_list("pk", flat=True)) == {recent.pk, *(j.pk for j in live)}


def test_status_narrows_what_goes():
    kept = job(JobStatus.FAILED, 10)
    gone = job(JobStatus.SUCCEEDED, 10)
    prune("--older-than", "7d", "--status", "succeeded")
    assert Job.objects.filter(pk=kept.pk).exists() and not Job.objects.filter(pk=gone.pk).exists()


def test_a_dry_run_counts_and_deletes_nothing():
    job(JobStatus.SUCCEEDED, 10)
    job(JobStatus.SUCCEEDED, 10)
    output = prune("--older-than", "7d", "--dry-run")
    assert "would delete: 2 jobs" in output
    assert Job.objects.count() == 2


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_only_a_real_prune_shows_a_live_progress_line():
    job(JobStatus.SUCCEEDED, 10)
    out = Terminal()
    call_command("outbox_prune", "--older-than", "7d", "--dry-run", stdout=out)
    assert "so far" not in out.getvalue() and "\r" not in out.getvalue()
    assert out.getvalue().startswith("outbox_prune would delete: 1 job, 0 workflows, 0 messages")
    out = Terminal()
    call_command("outbox_prune", "--older-than", "7d", stdout=out)
    assert "\rdeleted so far: 1 job, 0 workflows, 0 messages" in out.getvalue()


def test_counts_read_in_the_singular_and_the_plural():
    pruned = retention.Pruned()
    pruned.counts.update({"jobs": 1, "deliveries": 1, "attempts": 12345, "hourly counts": 1})
    assert (
        str(pruned) == "1 job, 0 workflows, 0 messages, 1 delivery, 12,345 attempts, 1 hourly count"
    )


@pytest.mark.django_db(transaction=True)
def test_old_messages_go_with_their_deliveries_and_attempts_unless_one_is_pending():
    webhooks.create_endpoint("https://a.example.com/in")
    webhooks.create_endpoint("https://b.example.com/in")
    done = old_message(10)
    pending = old_message(10, DeliveryStatus.PENDING)
    recent = old_message(1)
    endpoint = done.deliveries.first().endpoint
    EndpointHour.objects.create(endpoint=endpoint, hour=timezone.now() - timedelta(days=10))
    EndpointHour.objects.create(endpoint=endpoint, hour=timezone.now())
    pruned = retention.prune(timedelta(days=7))
    assert pruned.counts == {
        "jobs": 0,
        "workflows": 0,
        "messages": 1,
        "deliveries": 2,
        "attempts": 4,
        "hourly counts": 1,
    }
    assert set(Message.objects.values_list("pk", flat=True)) == {pending.pk, recent.pk}
    assert Attempt.objects.count() == 8  # the pending and the recent message keep theirs
    assert EndpointHour.objects.count() == 1


@pytest.mark.parametrize("statistics", ["fresh", "of an empty table"])
def test_deletes_go_in_chunks(monkeypatch, statistics):
    monkeypatch.setattr(retention, "CHUNK", 3)
    if statistics != "fresh" and connection.vendor == "postgresql":
        # Statistics taken on the empty table (as after a quiet spell) once made the
        # planner rescan the chunk's subquery, and the DELETE went past its chunk.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE django_outbox_job")
    for _ in range(7):
        job(JobStatus.SUCCEEDED, 10)
    seen = []
    retention.prune(timedelta(days=7), progress=lambda p: seen.append(p.counts["jobs"]))
    assert seen == [3, 6, 7]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--older-than", "7 days"], "is not an age"),
        (["--older-than", "0d"], "above zero"),
        (["--older-than=-3h"], "is not an age"),
        (["--older-than", "7d", "--status", "queued"], "queued and running jobs are never"),
        (
            ["--older-than", "7d", "--status", "succeeded,runing"],
            "^Jobs cannot be pruned by status 'runing': choose among succeeded, failed, cancelled",
        ),
        (
            ["--older-than", "7d", "--status", "queued,bogus"],
            "^Jobs cannot be pruned by statuses 'queued', 'bogus': choose among",
        ),
    ],
)
def test_bad_arguments_are_refused_and_nothing_is_deleted(arguments, message):
    job(JobStatus.SUCCEEDED, 10)
    with pytest.raises(CommandError, match=message):
        prune(*arguments)
    assert Job.objects.count() == 1


def test_ages_in_every_unit():
    assert [retention.parse_age(t) for t in ("90s", "30m", "12h", "7d", "2w", "1.5h")] == [
        timedelta(seconds=90),
        timedelta(minutes=30),
        timedelta(hours=12),
        timedelta(days=7),
        timedelta(weeks=2),
        timedelta(minutes=90),
    ]


def test_finished_statuses_are_the_models_own():
    finished = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
    assert set(retention.FINISHED_NAMES) == {status.value for status in finished}


@pytest.mark.django_db(transaction=True)
def test_a_worker_with_retention_prunes_on_its_own(settings):
    from django_outbox.worker import Worker
    from django_outbox.worker.process import start_in_thread
    from tests.conftest import stop_pool

    old = job(JobStatus.SUCCEEDED, 3)
    recent = job(JobStatus.SUCCEEDED, 0.5)
    settings.OUTBOX = settings.OUTBOX | {"RETENTION": {"OLDER_THAN": "1d", "EVERY_SECONDS": 0.2}}
    worker = Worker(queues=["default"], concurrency=1)
    thread = start_in_thread(worker)
    try:
        deadline = timezone.now() + timedelta(seconds=10)
        while Job.objects.filter(pk=old.pk).exists() and timezone.now() < deadline:
            threading.Event().wait(0.05)
        assert not Job.objects.filter(pk=old.pk).exists()
        assert Job.objects.filter(pk=recent.pk).exists()
    finally:
        worker.request_stop("test done")
        thread.join(10)
        stop_pool(worker.pool)


def test_a_failed_job_holding_its_sequence_is_kept_until_retried_or_skipped():
    from django_outbox.models import LimitKey

    holder = job(JobStatus.FAILED, 10)
    other = job(JobStatus.FAILED, 10)
    LimitKey.objects.create(key="sequence:order-1", held_by=holder.pk, updated_at=timezone.now())
    assert "1 job" in prune("--older-than", "7d", "--dry-run")
    assert "1 job" in prune("--older-than", "7d")
    assert list(Job.objects.values_list("pk", flat=True)) == [holder.pk]
    assert not Job.objects.filter(pk=other.pk).exists()
