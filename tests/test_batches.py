"""Batches: callbacks that run once when every job has succeeded or finished, and jobs
added while the batch runs."""

from __future__ import annotations

import functools
import threading

import pytest
from django.db import close_old_connections, transaction

from django_outbox import workflows
from django_outbox.jobs.claim import claim
from django_outbox.jobs.complete import Outcome, complete
from django_outbox.models import Job, JobStatus, Workflow
from tests import tasks
from tests.conftest import wait_until
from tests.models import Once


@pytest.mark.django_db(transaction=True)
def test_a_batch_calls_on_success_and_on_complete_once_with_every_result(run_worker):
    run = workflows.batch(
        *(workflows.step(tasks.double, n) for n in range(4)),
        on_success=workflows.step(tasks.upstream_seen, "success"),
        on_complete=workflows.step(tasks.upstream_seen, "complete"),
    ).enqueue("import")
    run_worker(concurrency=3)
    done = workflows.get(run.id)
    assert done.status == "succeeded"
    assert [s.result for s in done.steps[4:]] == [
        {"label": "success", "upstream": [0, 2, 4, 6]},
        {"label": "complete", "upstream": [0, 2, 4, 6]},
    ]
    assert done.result == {"label": "complete", "upstream": [0, 2, 4, 6]}


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_skips_on_success_and_on_complete_still_runs(run_worker):
    run = workflows.batch(
        workflows.step(tasks.double, 1),
        workflows.step(tasks.fails_for_good, "bad row"),
        on_success=workflows.step(tasks.upstream_seen, "success"),
        on_complete=workflows.step(tasks.upstream_seen, "complete"),
    ).enqueue()
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert done.status == "failed" and done.finished
    assert [s.status for s in done.steps] == [
        "succeeded",
        "failed",
        "upstream_failed",
        "succeeded",
    ]
    assert done.steps[3].result == {"label": "complete", "upstream": [2, None]}


@pytest.mark.django_db(transaction=True)
def test_a_job_adds_jobs_to_its_own_batch_and_the_callbacks_wait_for_them(run_worker):
    run = workflows.batch(
        workflows.step(tasks.adds_to_its_batch, 3),
        on_complete=workflows.step(tasks.upstream_seen, "complete"),
    ).enqueue()
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert done.status == "succeeded" and len(done.steps) == 2 + 3
    # The callback waited for the jobs added while it waited, and read their results.
    assert done.steps[1].result == {"label": "complete", "upstream": [3, 0, 2, 4]}
    assert [s.result for s in done.steps[2:]] == [0, 2, 4]
    callback = Job.objects.get(pk=done.steps[1].job_id)
    added = Job.objects.filter(pk__in=[s.job_id for s in done.steps[2:]])
    assert all(job.finished_at <= callback.started_at for job in added)


@pytest.mark.django_db(transaction=True)
def test_a_finished_batch_takes_no_more_jobs_and_keeps_nothing_of_the_try(run_worker):
    run = workflows.batch(
        workflows.step(tasks.noop), on_complete=workflows.step(tasks.noop)
    ).enqueue()
    run_worker()
    jobs_before = Job.objects.count()
    with pytest.raises(workflows.BatchClosed, match="has finished"):
        workflows.add_to_batch(run.id, workflows.step(tasks.noop))
    assert Job.objects.count() == jobs_before
    assert Workflow.objects.get(pk=run.id).steps_total == 2


@pytest.mark.django_db(transaction=True)
def test_adding_to_what_is_not_a_running_batch_is_a_clear_error():
    chain = workflows.chain(workflows.step(tasks.noop)).enqueue()
    with pytest.raises(ValueError, match="is not a batch"):
        workflows.add_to_batch(chain.id, workflows.step(tasks.noop))
    with pytest.raises(workflows.WorkflowDoesNotExist):
        workflows.add_to_batch(999_999, workflows.step(tasks.noop))
    with pytest.raises(ValueError, match="needs at least one step"):
        workflows.add_to_batch(chain.id)
    with pytest.raises(TypeError, match="takes a batch's id"):
        workflows.add_to_batch("7", workflows.step(tasks.noop))
    with pytest.raises(TypeError, match="takes steps"):
        workflows.batch(workflows.chain(workflows.step(tasks.noop)))
    with pytest.raises(TypeError, match="on_complete takes a step"):
        workflows.batch(workflows.step(tasks.noop), on_complete=tasks.noop)


@pytest.mark.django_db(transaction=True)
def test_jobs_added_from_outside_as_workers_finish_the_batch_are_waited_for_or_refused(
    start_worker,
):
    run = workflows.batch(
        *(workflows.step(tasks.noop) for _ in range(300)),
        on_complete=workflows.step(tasks.record_once, "batch done").immutable(),
    ).enqueue()
    added: list[int] = []
    refused = threading.Event()

    def keep_adding() -> None:
        try:
            while not refused.is_set():
                try:
                    with transaction.atomic():
                        (result,) = workflows.add_to_batch(run.id, workflows.step(tasks.noop))
                    added.append(Job.objects.for_result(result.id).get().pk)
                except workflows.BatchClosed:
                    refused.set()
        finally:
            close_old_connections()

    adder = threading.Thread(target=keep_adding)
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    adder.start()
    done = wait_until(
        lambda: (r := workflows.get(run.id)).finished and r, timeout=120, what="the batch"
    )
    refused.wait(30)
    adder.join(30)
    assert refused.is_set() and added  # it took jobs while open, and refused once finished
    callback = Job.objects.get(pk=done.steps[300].job_id)
    assert (callback.status, callback.attempts) == (JobStatus.SUCCEEDED, 1)
    assert Once.objects.filter(key="batch done").count() == 1
    members = Job.objects.filter(workflow_id=run.id).exclude(pk=callback.pk)
    assert members.count() == 300 + len(added)
    # Every job that joined finished before the callback started: none came too late.
    assert all(job.status == JobStatus.SUCCEEDED for job in members)
    assert max(job.finished_at for job in members) <= callback.started_at
    for worker in workers:
        worker.stop()


@pytest.mark.django_db(transaction=True)
def test_once_on_success_is_released_no_job_can_join():
    run = workflows.batch(
        workflows.step(tasks.double, 1), on_success=workflows.step(tasks.noop)
    ).enqueue()
    # The member succeeds; on_success is queued, not yet run.
    (claimed,) = claim("w1", ["default"], 1, 30)
    assert claimed.id == run.steps[0].job_id
    complete("w1", [Outcome(claimed, succeeded=True, return_value=2)])
    assert workflows.get(run.id).steps[1].status == "queued"
    with pytest.raises(workflows.BatchClosed):
        workflows.add_to_batch(run.id, workflows.step(tasks.noop))
    cancelled = workflows.batch(workflows.step(tasks.noop)).enqueue()
    workflows.cancel(cancelled.id)
    with pytest.raises(workflows.BatchClosed):
        workflows.add_to_batch(cancelled.id, workflows.step(tasks.noop))


@pytest.mark.django_db(transaction=True)
def test_retry_and_add_to_batch_at_once_never_deadlock():
    """Both take the batch's locks in one order: its callbacks' step rows, then the
    workflow's row (a completion's order). Run against each other a thousand times, on a
    batch cancelled a moment before: each ends as one of them ran first, never in a
    deadlock."""
    from django.db import connection

    if connection.vendor == "sqlite":
        pytest.skip("SQLite takes one write lock for the whole database: no lock order")
    failures: list[BaseException] = []
    ran = {"retried": 0, "added": 0, "refused": 0}

    def each(barrier: threading.Barrier, call) -> None:
        try:
            barrier.wait(5)
            call()
        except (workflows.BatchClosed, workflows.WorkflowNotRetryable):
            ran["refused"] += 1
        except BaseException as exc:  # a deadlock would be an OperationalError
            failures.append(exc)
        finally:
            close_old_connections()

    def add(batch: int) -> None:
        with transaction.atomic():
            workflows.add_to_batch(batch, workflows.step(tasks.noop))
        ran["added"] += 1

    def retry(batch: int) -> None:
        workflows.retry(batch)
        ran["retried"] += 1

    for _ in range(1000):
        run = workflows.batch(
            workflows.step(tasks.noop), on_success=workflows.step(tasks.noop)
        ).enqueue()
        workflows.cancel(run.id)
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(target=each, args=(barrier, functools.partial(retry, run.id))),
            threading.Thread(target=each, args=(barrier, functools.partial(add, run.id))),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not failures, failures[0]
    assert ran["retried"] == 1000  # a cancelled batch can always be retried
    assert ran["added"] + ran["refused"] == 1000


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_a_step_of_a_chain_and_what_follows_waits_for_its_callback(run_worker):
    run = workflows.chain(
        workflows.step(tasks.add, 1, 2),
        workflows.batch(
            workflows.step(tasks.adds_to_its_batch, 2).immutable(),
            workflows.step(tasks.double),  # takes the step before the batch's result
            on_complete=workflows.step(tasks.upstream_seen, "complete"),
        ),
        workflows.step(tasks.echo),
    ).enqueue("chained batch")
    assert [s.status for s in run.steps] == ["queued", "waiting", "waiting", "waiting", "waiting"]
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert done.status == "succeeded" and len(done.steps) == 5 + 2
    # The callback waited for the jobs added while the batch ran; what follows the batch
    # got the callback's result, after it.
    complete = {"label": "complete", "upstream": [2, 6, 0, 2]}
    assert done.steps[3].result == complete
    assert done.result == {"args": [complete], "kwargs": {}}
    jobs = {s.position: Job.objects.get(pk=s.job_id) for s in done.steps}
    assert jobs[0].finished_at <= min(jobs[p].started_at for p in (1, 2, 5, 6))
    assert max(jobs[p].finished_at for p in (1, 2, 5, 6)) <= jobs[3].started_at
    assert jobs[3].finished_at <= jobs[4].started_at


@pytest.mark.django_db(transaction=True)
def test_what_follows_a_batch_without_callbacks_gets_every_members_result(run_worker):
    run = workflows.chain(
        workflows.step(tasks.add, 1, 2),
        workflows.batch(
            workflows.step(tasks.adds_to_its_batch, 1).immutable(), workflows.step(tasks.double)
        ),
        workflows.step(tasks.echo),
    ).enqueue()
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert done.status == "succeeded"
    assert done.result == {"args": [[1, 6, 0]], "kwargs": {}}  # the added member's too


@pytest.mark.django_db(transaction=True)
def test_a_batch_in_a_chain_takes_no_job_before_it_runs_and_a_workflow_holds_one():
    run = workflows.chain(
        workflows.step(tasks.noop),
        workflows.batch(workflows.step(tasks.noop), on_complete=workflows.step(tasks.noop)),
    ).enqueue()
    with pytest.raises(workflows.BatchNotStarted, match="waits for the steps before it"):
        workflows.add_to_batch(run.id, workflows.step(tasks.noop))
    assert Workflow.objects.get(pk=run.id).steps_total == 3 and Job.objects.count() == 3
    with pytest.raises(ValueError, match="one batch at most"):
        workflows.chain(
            workflows.batch(workflows.step(tasks.noop)),
            workflows.batch(workflows.step(tasks.noop)),
        ).enqueue()
    assert Workflow.objects.count() == 1 and Job.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_failed_workflow_holding_a_batch_is_retried_and_its_batch_calls_back_once(
    run_worker,
):
    run = workflows.chain(
        workflows.step(tasks.add, 1, 2),
        workflows.batch(
            workflows.step(tasks.double, 5).immutable(),
            workflows.step(tasks.fails_for_good, "bad row").immutable(),
            on_success=workflows.step(tasks.upstream_seen, "success"),
        ),
        workflows.step(tasks.echo),
    ).enqueue()
    run_worker(concurrency=2)
    failed = workflows.get(run.id)
    assert failed.status == "failed"
    assert [s.status for s in failed.steps] == [
        "succeeded",
        "succeeded",
        "failed",
        "upstream_failed",
        "upstream_failed",
    ]
    # The failed member is mended, then the workflow retried: it, the callback and what
    # follows run again; the rest keeps its results.
    Job.objects.filter(pk=failed.steps[2].job_id).update(task_path="tests.tasks.noop", args=[])
    assert workflows.retry(run.id) == 3
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert done.status == "succeeded"
    success = {"label": "success", "upstream": [10, None]}
    assert done.steps[3].result == success and done.result == {"args": [success], "kwargs": {}}
