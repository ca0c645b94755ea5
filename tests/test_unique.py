"""Unique jobs: while a job with a key is queued or running, enqueueing another with the
same key returns that job and inserts nothing."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from django_outbox import enqueue_many
from django_outbox.compat import InvalidTask, task
from django_outbox.exceptions import InvalidTaskArguments
from django_outbox.lib.resultids import result_id
from django_outbox.models import Job, JobStatus
from tests import tasks

pytestmark = pytest.mark.django_db


def test_a_second_enqueue_with_the_key_returns_the_queued_job():
    first = tasks.add.using(unique_key="sum-1").enqueue(1, 2)
    second = tasks.add.using(unique_key="sum-1").enqueue(3, 4)
    assert second.id == first.id
    assert second.args == [1, 2]  # the job that holds the key, as it was enqueued
    assert Job.objects.count() == 1
    other = tasks.add.using(unique_key="sum-2").enqueue(1, 2)
    assert other.id != first.id


def test_a_running_job_holds_its_key_and_a_finished_one_releases_it():
    first = tasks.add.using(unique_key="sum").enqueue(1, 2)
    Job.objects.for_result(first.id).update(status=JobStatus.RUNNING)
    assert tasks.add.using(unique_key="sum").enqueue(1, 2).id == first.id
    for finished in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
        Job.objects.filter(dedup_key="sum").update(status=finished)
        again = tasks.add.using(unique_key="sum").enqueue(1, 2)
        assert again.id != first.id and again.status.name == "READY"
    assert Job.objects.filter(dedup_key="sum").count() == 4


def test_a_task_may_carry_its_key_or_a_function_of_its_arguments():
    assert tasks.rebuild_index.enqueue().id == tasks.rebuild_index.enqueue().id
    first = tasks.build_report.enqueue(42)
    assert tasks.build_report.enqueue(42).id == first.id
    assert tasks.build_report.enqueue(43).id != first.id
    # The function says None: this call is not unique.
    assert tasks.build_report.enqueue().id != tasks.build_report.enqueue().id
    assert Job.objects.for_result(first.id).get().dedup_key == "report-42"


def test_enqueue_many_with_a_key_inserts_one_job_and_returns_it_for_every_call():
    results = enqueue_many(tasks.rebuild_index, [((), {}), ((), {}), ((), {})])
    assert len({result.id for result in results}) == 1
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    "key, message",
    [
        ("", "non-empty string"),
        ("   ", "non-empty string"),
        (42, "non-empty string"),
        ("k" * 256, "at most 255 characters"),
        ("outbox.delivery:1", "django_outbox's own"),
    ],
)
def test_a_bad_key_is_refused_and_nothing_is_enqueued(key, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.add.using(unique_key=key).enqueue(1, 2)
    with pytest.raises(InvalidTask, match=message):
        task(unique_key=key)(tasks.add.func)
    assert not Job.objects.exists()


def test_a_key_function_returning_a_bad_key_is_refused_at_enqueue():
    bad = task(unique_key=lambda args, kwargs: 7)(tasks.add.func)
    with pytest.raises(InvalidTaskArguments, match=r"unique key function of .*non-empty string"):
        bad.enqueue(1, 2)
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_unique_enqueue_leaves_the_key_free():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.using(unique_key="once").enqueue(1, 2)
        raise RuntimeError("the view failed")
    kept = tasks.add.using(unique_key="once").enqueue(5, 6)
    stored = Job.objects.get()
    assert stored.args == [5, 6] and kept.id == result_id(stored.pk, stored.token)


@pytest.mark.django_db(transaction=True)
def test_two_transactions_racing_for_a_key_leave_one_job():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has one writer at a time: its enqueues never overlap")
    from django.db import connections

    inserted = threading.Event()
    results = {}

    def first() -> None:
        with transaction.atomic():
            results["first"] = tasks.add.using(unique_key="race").enqueue(1, 2)
            inserted.set()
            threading.Event().wait(0.5)  # hold the transaction open
        connections.close_all()

    def second() -> None:
        inserted.wait(5)
        # Meets the uncommitted key: PostgreSQL makes this INSERT wait for the first
        # transaction, then inserts nothing and finds the committed job.
        results["second"] = tasks.add.using(unique_key="race").enqueue(3, 4)
        connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results["first"].id == results["second"].id
    assert Job.objects.filter(dedup_key="race").count() == 1


@pytest.mark.skipif(
    connection.vendor == "postgresql", reason="its planner picks by the table's size"
)
def test_the_job_holding_a_key_is_found_through_the_index_of_active_keys():
    """MariaDB cannot use its index of active keys for ``dedup_key = …``, and SQLite uses
    a partial index only where the query states its condition in its own terms: a
    lookup of the holder read the whole job table (on every enqueue of a held key)."""
    from django_outbox.jobs.dedup import active_with_keys

    held = tasks.add.using(unique_key="sum-1").enqueue(1, 2)
    tasks.add.using(unique_key="sum-2").enqueue(1, 2)
    Job.objects.filter(dedup_key="sum-2").update(status=JobStatus.SUCCEEDED)  # not active
    key = Job.objects.get(dedup_key__isnull=False, status=JobStatus.QUEUED).dedup_key
    lookup = active_with_keys("default", [key, "sum-2", "nobody's"])
    sql, params = lookup.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            assert "USING INDEX outbox_job_dedup_active" in plan, plan
        else:
            cursor.execute(f"EXPLAIN {sql}", params)
            columns = [column[0] for column in cursor.description]
            (step,) = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            assert step["key"] == "outbox_job_dedup_active", step
    assert [result_id(job.pk, job.token) for job in lookup] == [held.id]
