"""Rows a run hands to the worker are written with its job's outcome, in one transaction
and one statement per batch (jobs/sidewrites.py)."""

import logging
import time

import pytest

from django_outbox.jobs import sidewrites
from django_outbox.models import Job, JobStatus
from django_outbox.testing import run_jobs
from tests import tasks
from tests.models import Execution


@pytest.fixture(autouse=True)
def _no_batches_yet() -> None:
    tasks.deferred_batches.clear()


def _job(result_id: str) -> Job:
    return Job.objects.for_result(result_id).get()


def test_a_workers_runs_write_what_they_deferred_with_their_outcomes_in_one_batch(run_worker):
    returned = [tasks.records_with_its_outcome.enqueue(f"r{n}") for n in range(3)]
    retried = tasks.records_with_its_outcome.enqueue("retried", then="retry")
    failed = tasks.records_with_its_outcome.enqueue("failed", then="fail")
    run_worker(concurrency=8)
    time.sleep(0.05)  # the failed run's retry falls due (its backoff is 0.01-0.02 s)
    run_worker(concurrency=8)
    rows = {(e.key, e.attempt) for e in Execution.objects.all()}
    assert rows == {
        ("r0", 1),
        ("r1", 1),
        ("r2", 1),
        ("retried", 1),
        ("retried", 2),
        ("failed", 1),
        ("failed", 2),
    }
    assert all(_job(r.id).status == JobStatus.SUCCEEDED for r in [*returned, retried])
    assert _job(failed.id).status == JobStatus.FAILED
    # Each row once, and the first runs' rows shared batches: fewer batches than rows.
    written = [key for batch in tasks.deferred_batches for key in batch]
    assert sorted(written) == sorted(key for key, _ in rows)
    assert len(tasks.deferred_batches) < len(written)


def test_run_jobs_writes_them_too(transactional_db):
    result = tasks.records_with_its_outcome.enqueue("in a test")
    run_jobs()
    assert [(e.key, e.job_id) for e in Execution.objects.all()] == [
        ("in a test", _job(result.id).pk)
    ]
    assert tasks.deferred_batches == [["in a test"]]


def test_a_task_called_outside_a_worker_writes_at_once_itself(db):
    assert sidewrites.defer(tasks.write_executions, (1, 1, "x")) is False
    with sidewrites.collecting() as writes:
        assert sidewrites.defer(tasks.write_executions, (1, 1, "x")) is True
    assert writes == [(tasks.write_executions, (1, 1, "x"))]
    assert sidewrites.defer(tasks.write_executions, (1, 1, "x")) is False  # collected no more


def test_a_refused_write_fails_its_own_run_only_and_says_why(run_worker, caplog):
    kept = tasks.records_with_its_outcome.enqueue("kept")
    refused = tasks.records_with_its_outcome.enqueue("twice", then="duplicate")
    with caplog.at_level(logging.ERROR, logger="django_outbox.worker"):
        run_worker(concurrency=2)
    assert _job(kept.id).status == JobStatus.SUCCEEDED
    assert Execution.objects.filter(key="kept").count() == 1
    job = _job(refused.id)
    # Not stored: the run failed (to be retried, if its retry fell due before the burst
    # ended), and its error says the database refused what it recorded.
    assert job.status in (JobStatus.QUEUED, JobStatus.FAILED)
    assert (
        "the database refused this run's result and what it recorded"
        in (job.errors[0]["traceback"])
    )
    assert "refused its result" in caplog.text


def test_a_failing_follow_up_is_logged_and_loses_nothing(run_worker, caplog, monkeypatch):
    def broken(keys: list[str]) -> None:
        raise RuntimeError("a signal receiver broke")

    original = tasks.write_executions

    def writer(items: list[tuple[int, int, str]]):
        original(items)
        return lambda: broken([key for _, _, key in items])

    monkeypatch.setattr(tasks, "write_executions", writer)
    result = tasks.records_with_its_outcome.enqueue("followed")
    with caplog.at_level(logging.ERROR, logger="django_outbox.worker"):
        run_worker()
    assert _job(result.id).status == JobStatus.SUCCEEDED
    assert Execution.objects.filter(key="followed").count() == 1
    assert "a signal receiver broke" in caplog.text
