"""Concurrency keys and sequences (jobs/keys.py): what a user sees of them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_outbox.compat import InvalidTask
from django_outbox.exceptions import InvalidTaskArguments
from django_outbox.jobs import operations
from django_outbox.jobs.claim import claim
from django_outbox.models import Job, JobStatus, LimitKey
from django_outbox.worker.loop import WorkerStats
from tests.models import Execution
from tests.tasks import in_sequence, in_sequence_going_on, noop, per_customer

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(task_path: str = "") -> list[str]:
    jobs = Job.objects.order_by("id")
    if task_path:
        jobs = jobs.filter(task_path=task_path)
    return list(jobs.values_list("status", flat=True))


def drain(run_worker: Callable[..., WorkerStats], **options: Any) -> None:
    """Run workers until no job is queued or running (a burst worker leaves while a retry
    waits for its backoff)."""
    for _ in range(50):
        run_worker(**options)
        if not Job.objects.filter(status__in=["queued", "running"]).exists():
            return
        time.sleep(0.05)
    pytest.fail(f"jobs still queued or running: {statuses()}")


def most_at_once(runs: list[Execution]) -> int:
    """The most runs that overlapped in time."""
    events = sorted(
        [(run.started, 1) for run in runs] + [(run.finished, -1) for run in runs],
        key=lambda event: (event[0], event[1]),  # an end before a start at the same instant
    )
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def test_jobs_over_their_keys_limit_are_held_and_other_keys_are_not() -> None:
    for n in range(5):
        per_customer.enqueue(1, n)
    per_customer.enqueue(2, 0)
    assert statuses() == ["queued", "queued", "held", "held", "held", "queued"]
    key = LimitKey.objects.get(key="concurrency:customer-1")
    assert (key.limit, key.holds_on_failure, key.held_by) == (2, False, None)


def test_a_rollback_enqueues_nothing_and_takes_no_turn() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        per_customer.enqueue(1, 0)
        per_customer.enqueue(1, 1)
        raise RuntimeError("the view failed")
    assert not Job.objects.exists()
    per_customer.enqueue(1, 2)
    assert statuses() == ["queued"]


def test_enqueue_many_holds_all_but_the_limit_of_each_key() -> None:
    from django_outbox import enqueue_many

    enqueue_many(per_customer, [((customer, n), {}) for n in range(3) for customer in (1, 2)])
    by_customer = {}
    for job in Job.objects.order_by("id"):
        by_customer.setdefault(job.args[0], []).append(job.status)
    assert by_customer == {1: ["queued", "queued", "held"], 2: ["queued", "queued", "held"]}


def test_a_keys_limit_is_never_exceeded_and_every_job_runs(
    run_worker: Callable[..., WorkerStats],
) -> None:
    for n in range(6):
        per_customer.enqueue(1, n, 0.1)
        per_customer.enqueue(2, n, 0.1)
    drain(run_worker, concurrency=6)
    assert set(statuses()) == {"succeeded"}
    for customer in (1, 2):
        runs = list(Execution.objects.filter(key__startswith=f"{customer}:"))
        assert len(runs) == 6
        assert most_at_once(runs) == 2, f"customer {customer}: runs overlapped beyond the limit"


def test_a_sequence_runs_in_enqueue_order_one_at_a_time_across_retries(
    run_worker: Callable[..., WorkerStats],
) -> None:
    for n in range(5):
        in_sequence.enqueue(7, n, failures=2 if n == 1 else 0, seconds=0.02)
        in_sequence.enqueue(8, n, seconds=0.02)
    assert statuses().count("queued") == 2  # one per sequence
    drain(run_worker, concurrency=4)
    assert set(statuses()) == {"succeeded"}
    for order in (7, 8):
        runs = list(Execution.objects.filter(key__startswith=f"{order}:").order_by("started"))
        steps = [run.key for run in runs]
        expected = [f"{order}:{n}" for n in range(5)]
        if order == 7:
            expected[1:2] = ["7:1", "7:1", "7:1"]  # two failures, then the success
        assert steps == expected
        assert most_at_once(runs) == 1


def test_a_job_failing_for_good_holds_its_sequence_until_skipped(
    run_worker: Callable[..., WorkerStats],
) -> None:
    for n in range(4):
        in_sequence.enqueue(3, n, failures=9 if n == 1 else 0)
    in_sequence.enqueue(4, 0)
    drain(run_worker)
    assert statuses() == ["succeeded", "failed", "held", "held", "succeeded"]
    failed = Job.objects.get(status="failed")
    assert LimitKey.objects.get(key="sequence:order-3").held_by == failed.pk

    changed = operations.skip(Job.objects.filter(pk=failed.pk))
    assert changed.done == 1
    drain(run_worker)
    assert statuses() == ["succeeded", "failed", "succeeded", "succeeded", "succeeded"]
    assert LimitKey.objects.get(key="sequence:order-3").held_by is None


def test_retrying_the_failed_job_runs_it_first_then_the_rest_in_order(
    run_worker: Callable[..., WorkerStats],
) -> None:
    for n in range(3):
        in_sequence.enqueue(5, n, failures=3 if n == 0 else 0)
    drain(run_worker)
    assert statuses() == ["failed", "held", "held"]
    failed = Job.objects.get(status="failed")
    assert operations.retry_now(Job.objects.filter(pk=failed.pk)).done == 1
    assert statuses() == ["queued", "held", "held"]
    drain(run_worker)
    assert statuses() == ["succeeded"] * 3
    keys = list(Execution.objects.order_by("started").values_list("key", flat=True))
    assert keys == ["5:0"] * 4 + ["5:1", "5:2"]


def test_a_sequence_told_to_go_on_does_so_past_a_failed_job(
    run_worker: Callable[..., WorkerStats],
) -> None:
    for n in range(3):
        in_sequence_going_on.enqueue(6, n, fail=n == 0)
    drain(run_worker)
    assert statuses() == ["failed", "succeeded", "succeeded"]
    assert LimitKey.objects.get(key="sequence:order-6").held_by is None


def test_cancelling_a_queued_job_gives_its_turn_to_the_next_held_one() -> None:
    jobs = [in_sequence.enqueue(9, n) for n in range(3)]
    assert statuses() == ["queued", "held", "held"]
    from django_outbox import cancel

    assert cancel(jobs[0]) == "cancelled"
    assert statuses() == ["cancelled", "queued", "held"]
    assert cancel(jobs[2]) == "cancelled"  # a held job can be cancelled too
    assert statuses() == ["cancelled", "queued", "cancelled"]


def test_a_key_function_and_using_choose_the_key() -> None:
    task_ = per_customer.using(concurrency_key="everyone", concurrency_limit=1)
    task_.enqueue(1, 0)
    task_.enqueue(2, 0)
    assert statuses() == ["queued", "held"]
    assert set(Job.objects.values_list("limit_key", flat=True)) == {"concurrency:everyone"}


def test_a_key_function_returning_none_gives_no_key() -> None:
    nobody = per_customer.using(concurrency_key=None)  # unchanged: the function
    assert nobody.concurrency_key is per_customer.concurrency_key

    noop.using(concurrency_key=lambda args, kwargs: None).enqueue()
    assert statuses() == ["queued"]
    assert Job.objects.get().limit_key is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency_key": "a", "sequence_key": "b"}, "not both"),
        ({"concurrency_key": "a", "concurrency_limit": 0}, "concurrency_limit must be"),
        ({"concurrency_key": "a", "concurrency_limit": True}, "concurrency_limit must be"),
        ({"concurrency_key": "a", "concurrency_limit": 1.5}, "concurrency_limit must be"),
        ({"concurrency_key": ""}, "non-empty string"),
        ({"sequence_key": 42}, "non-empty string"),
        ({"sequence_key": "x" * 244}, "at most 243 characters"),
        ({"sequence_key": "a", "sequence_on_failure": "skip"}, "sequence_on_failure must be"),
    ],
)
def test_bad_key_options_are_refused_where_the_task_is_made(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTask, match=message):
        noop.using(**options)
    assert not Job.objects.exists()


@pytest.mark.parametrize("answer", ["", 42, "y" * 300])
def test_a_key_functions_bad_answer_is_refused_at_enqueue_and_nothing_is_written(
    answer: object,
) -> None:
    bad = noop.using(sequence_key=lambda args, kwargs: answer)
    with pytest.raises(InvalidTaskArguments, match="The sequence key function of"):
        bad.enqueue()
    assert not Job.objects.exists()
    assert not LimitKey.objects.exists()


def test_a_workflow_step_refuses_a_key() -> None:
    from django_outbox import workflows

    with pytest.raises(ValueError, match="cannot take them yet"):
        workflows.step(in_sequence, 1, 0)


def test_jobs_held_behind_a_busy_key_cost_other_jobs_claim_nothing() -> None:
    """10,000 jobs behind one key: the claim of other jobs reads as many statements and
    takes the same jobs as without them."""
    for _ in range(3):
        noop.enqueue()

    def claimed_with_statements() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as queries:
            jobs = claim("w", ["default"], 10, 60)
        Job.objects.filter(id__in=[job.id for job in jobs]).update(status="queued")
        return len(jobs), len(queries)

    without = claimed_with_statements()
    from django_outbox import enqueue_many

    busy = per_customer.using(concurrency_limit=1)
    enqueue_many(busy, [((1, n), {}) for n in range(10_000)])
    assert Job.objects.filter(status="held").count() == 9_999
    assert claimed_with_statements() == (without[0] + 1, without[1])


def test_a_unique_key_and_a_concurrency_key_together() -> None:
    unique = per_customer.using(unique_key="report-1")
    first = unique.enqueue(1, 0)
    again = unique.enqueue(1, 1)
    assert again.id == first.id
    assert statuses() == ["queued"]
    per_customer.enqueue(1, 2)
    per_customer.enqueue(1, 3)
    assert statuses() == ["queued", "queued", "held"]
    assert Job.objects.filter(status=JobStatus.HELD).get().args == [1, 3]


def test_deleting_a_queued_job_in_the_admin_gives_its_turn_to_the_next(admin_client) -> None:
    for n in range(3):
        in_sequence.enqueue(11, n)
    first = Job.objects.order_by("id").first()
    assert first is not None
    response = admin_client.post(
        "/admin/django_outbox/job/",
        {"action": "delete_selected", "_selected_action": [first.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert statuses() == ["queued", "held"]


def test_the_stalled_check_sweep_queues_jobs_whose_turn_was_freed_by_hand() -> None:
    from django_outbox.jobs import keys

    for n in range(3):
        in_sequence.enqueue(12, n)
        per_customer.enqueue(3, n)
    assert keys.sweep() == 0  # nothing to do: every key has its turns taken
    # By hand, outside the engine: the first queued job of each key.
    for key in ("sequence:order-12", "concurrency:customer-3"):
        Job.objects.filter(pk=Job.objects.filter(limit_key=key).order_by("id")[0].pk).delete()
    assert keys.sweep() == 2
    assert Job.objects.filter(status="queued").count() == 3  # one of order 12, two of 3
    assert keys.sweep() == 0
