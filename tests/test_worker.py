"""The worker loop, run in this process until nothing is due."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

import django_outbox
from django_outbox.compat import TaskResultStatus, task_finished, task_started
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Job, JobStatus
from django_outbox.worker import Worker
from tests import tasks
from tests.conftest import wait_until
from tests.models import Execution


def job_of(result):
    return Job.objects.for_result(result.id).get()


def test_runs_jobs_and_stores_their_results(run_worker):
    results = [tasks.add.enqueue(i, 1) for i in range(20)]
    stats = run_worker()
    assert stats.succeeded == 20
    for i, result in enumerate(results):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == i + 1
        assert result.attempts == 1 and result.finished_at is not None


def test_async_tasks_run(run_worker):
    result = tasks.async_add.enqueue(2, 3)
    run_worker()
    assert tasks.async_add.get_result(result.id).return_value == 5


def test_context_attempt_starts_at_one_and_counts_retries(run_worker):
    first = tasks.report_attempt.enqueue()
    retried = tasks.fails_then_succeeds.enqueue(failures=2)
    run_worker()
    assert tasks.report_attempt.get_result(first.id).return_value == {
        "attempt": 1,
        "id": first.id,
    }
    # Retries wait out a (short) backoff; burst leaves when nothing is due, so go again.
    for _ in range(20):
        if job_of(retried).status != JobStatus.QUEUED:
            break
        run_worker()
    result = tasks.fails_then_succeeds.get_result(retried.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert [e.exception_class for e in result.errors] == [ConnectionError, ConnectionError]


def test_a_failing_job_is_retried_then_failed_with_its_tracebacks(run_worker):
    result = tasks.always_fails.enqueue("no luck")
    for _ in range(20):
        run_worker()
        if job_of(result).status == JobStatus.FAILED:
            break
    result = tasks.always_fails.get_result(result.id)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    assert len(result.errors) == 3
    assert all(e.exception_class is ValueError for e in result.errors)
    assert "ValueError: no luck" in result.errors[-1].traceback
    assert 'File "' in result.errors[-1].traceback  # a real traceback, not just the message


@pytest.mark.parametrize(
    ("task", "exception"),
    [
        (tasks.raises_system_exit, "builtins.SystemExit"),
        (tasks.raises_keyboard_interrupt, "builtins.KeyboardInterrupt"),
    ],
)
def test_system_exit_and_keyboard_interrupt_fail_the_job_not_the_worker(
    run_worker, task, exception
):
    bad = task.enqueue()
    good = tasks.add.enqueue(1, 1)
    stats = run_worker(concurrency=1)
    assert stats.failed == 1 and stats.succeeded == 1
    assert job_of(bad).status == JobStatus.FAILED
    assert job_of(bad).errors[0]["exception_class_path"] == exception
    assert job_of(good).return_value == 2


def test_a_task_path_that_no_longer_imports_fails_clearly_and_the_worker_goes_on(run_worker):
    good = tasks.add.enqueue(2, 2)
    gone = Job.objects.create(task_path="tests.tasks.renamed_long_ago", max_attempts=1)
    not_a_task = Job.objects.create(task_path="tests.tasks.timezone", max_attempts=1)
    run_worker()
    gone.refresh_from_db()
    assert gone.status == JobStatus.FAILED
    assert gone.errors[0]["exception_class_path"] == "django_outbox.exceptions.TaskNotFound"
    assert "'tests.tasks.renamed_long_ago' could not be imported" in gone.errors[0]["traceback"]
    not_a_task.refresh_from_db()
    assert "is a module, not a task" in not_a_task.errors[0]["traceback"]
    assert job_of(good).return_value == 4


def test_a_return_value_json_cannot_hold_fails_the_job(run_worker):
    result = tasks.returns_object.enqueue()
    run_worker()
    job = job_of(result)
    assert job.status == JobStatus.FAILED
    assert "returned a value JSON cannot hold" in job.errors[0]["traceback"]


def test_a_job_over_its_timeout_is_failed_at_its_timeout_while_its_thread_runs_on(
    run_worker, caplog
):
    result = tasks.overruns.enqueue(1.5)  # timeout 0.2 s, max_attempts 1
    quick = tasks.add.enqueue(1, 2)
    started = timezone.now()
    stats = run_worker(concurrency=2, shutdown_timeout=5)
    job = job_of(result)
    assert job.status == JobStatus.FAILED
    assert job.errors[0]["exception_class_path"] == "django_outbox.exceptions.JobTimeout"
    assert "ran over its 200 ms timeout" in job.errors[0]["traceback"]
    # Recorded at the timeout, not when the function returned 1.5 s after it started.
    assert job.finished_at - started < timedelta(seconds=1.2)
    assert job.worker_id is None and job.lease_until is None
    assert job_of(quick).status == JobStatus.SUCCEEDED
    assert (stats.succeeded, stats.failed) == (1, 1)
    # The stuck thread is reported with where it is stuck.
    report = next(
        r.getMessage() for r in caplog.records if "over its 200 ms timeout" in r.getMessage()
    )
    assert "its thread cannot be stopped and is still running here" in report
    assert "time.sleep(seconds)" in report


def test_a_task_over_its_timeout_sees_context_cancelled_and_can_stop(run_worker):
    result = tasks.stops_when_told.enqueue(5.0)  # timeout 0.2 s
    run_worker(concurrency=2, shutdown_timeout=5)
    assert job_of(result).status == JobStatus.FAILED
    execution = wait_until(
        lambda: Execution.objects.filter(finished__isnull=False).first(),
        timeout=3,
        what="the timed-out run to stop",
    )
    assert execution.key == "told to stop"
    assert execution.finished - execution.started < timedelta(seconds=2)
    # What the abandoned run returned does not overwrite the recorded timeout.
    assert job_of(result).errors[0]["exception_class_path"] == (
        "django_outbox.exceptions.JobTimeout"
    )


def test_delayed_jobs_do_not_run_early(run_worker):
    later = tasks.noop.using(run_after=timedelta(hours=1)).enqueue()
    now = tasks.noop.enqueue()
    run_worker()
    assert job_of(now).status == JobStatus.SUCCEEDED
    assert job_of(later).status == JobStatus.QUEUED and job_of(later).attempts == 0


def test_higher_priority_runs_first(run_worker):
    low = django_outbox.enqueue_many(tasks.noop.using(priority=-5), [((), {})] * 5)
    high = django_outbox.enqueue_many(tasks.noop.using(priority=50), [((), {})] * 5)
    run_worker(concurrency=1, batch_size=1)
    finished = list(Job.objects.order_by("finished_at", "id").values_list("pk", flat=True))
    assert finished == [parse_result_id(r.id).pk for r in [*high, *low]]


def test_lifecycle_signals_are_sent(run_worker):
    seen = []

    def on_started(sender, task_result, **kwargs):
        seen.append(("started", task_result.id, task_result.status))

    def on_finished(sender, task_result, **kwargs):
        seen.append(("finished", task_result.id, task_result.status))

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        ok = tasks.noop.enqueue()
        run_worker()
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    assert seen == [
        ("started", ok.id, TaskResultStatus.RUNNING),
        ("finished", ok.id, TaskResultStatus.SUCCESSFUL),
    ]


def test_finished_signal_carries_the_outcome(run_worker):
    """task_finished gets the run's result up to date: status, return value, errors and
    finishing time, as get_result() reads them from the stored job."""
    finished = {}

    def on_finished(sender, task_result, **kwargs):
        finished[task_result.id] = task_result

    task_finished.connect(on_finished)
    try:
        ok = tasks.add.enqueue(2, 3)
        bad = tasks.always_fails.using(queue_name="default").enqueue("nope")
        Job.objects.for_result(bad.id).update(max_attempts=1)
        run_worker()
    finally:
        task_finished.disconnect(on_finished)
    assert finished[ok.id].status == TaskResultStatus.SUCCESSFUL
    assert finished[ok.id].return_value == 5
    assert finished[ok.id].finished_at == tasks.add.get_result(ok.id).finished_at
    assert finished[bad.id].status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in finished[bad.id].errors] == ["builtins.ValueError"]
    assert "nope" in finished[bad.id].errors[0].traceback
    assert finished[bad.id].finished_at is not None


def test_batches_keep_statements_per_job_low(run_worker):
    django_outbox.enqueue_many(tasks.noop, [((), {})] * 400)
    stats = run_worker(concurrency=4, batch_size=40)
    assert stats.succeeded == 400
    assert stats.statements / stats.succeeded < 0.25


def test_bad_worker_options_are_refused():
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        Worker(queues=["default"], concurrency=0)
    with pytest.raises(ValueError, match="at least one queue"):
        Worker(queues=[])


def test_after_heartbeats_failed_only_results_still_leased_are_written(run_worker):
    kept, taken = tasks.add.enqueue(1, 1), tasks.add.enqueue(2, 2)
    worker = Worker(queues=["default"])
    from django_outbox.jobs.claim import claim
    from django_outbox.jobs.types import Outcome

    claimed = claim(worker.id, ["default"], 2, 30)
    # The database was away longer than a lease; another worker took one job back.
    Job.objects.for_result(taken.id).update(worker_id="someone-else")
    worker.completer.leases_renewed_at -= 3600
    finished = []

    def on_finished(sender, task_result, **kwargs):
        finished.append(task_result.id)

    task_finished.connect(on_finished)
    try:
        worker.completer.add([Outcome(job, succeeded=True, return_value=0) for job in claimed])
        worker.completer.flush()
    finally:
        task_finished.disconnect(on_finished)
        worker.pool.shutdown()
    assert (worker.stats.succeeded, worker.stats.lost) == (1, 1)
    assert finished == [kept.id]
    assert job_of(kept).status == JobStatus.SUCCEEDED
    assert job_of(taken).status == JobStatus.RUNNING and job_of(taken).worker_id == "someone-else"


def test_when_every_thread_is_stuck_in_a_timed_out_job_waiting_jobs_go_back(run_worker):
    stuck = tasks.overruns.enqueue(2.0)
    waiting = tasks.add.enqueue(1, 1)
    stats = run_worker(concurrency=1, batch_size=4, shutdown_timeout=0)
    # Recorded as timed out at once, though its thread still runs.
    assert job_of(stuck).status == JobStatus.FAILED
    # It was claimed behind the stuck thread; it went back for another worker, unstarted.
    assert (job_of(waiting).status, job_of(waiting).attempts) == (JobStatus.QUEUED, 0)
    assert stats.released == 1


def test_a_result_no_database_could_store_fails_that_job_and_blocks_no_other(run_worker):
    bad = tasks.returns_nul.enqueue()
    good = [tasks.add.enqueue(i, i) for i in range(5)]
    stats = run_worker()
    assert (stats.succeeded, stats.failed) == (5, 1)
    job = job_of(bad)
    assert job.status == JobStatus.FAILED
    assert "NUL character" in job.errors[0]["traceback"]
    assert all(job_of(r).status == JobStatus.SUCCEEDED for r in good)


def test_the_retry_of_a_timed_out_job_runs_and_the_late_result_is_dropped(run_worker):
    result = tasks.overruns_first_time.enqueue()  # attempt 1 sleeps 0.6 s past its 0.2 s
    for _ in range(20):
        run_worker(concurrency=2, shutdown_timeout=5)
        if job_of(result).status != JobStatus.QUEUED:
            break
    job = job_of(result)
    assert job.status == JobStatus.SUCCEEDED and job.return_value == 2
    assert job.errors[0]["exception_class_path"] == "django_outbox.exceptions.JobTimeout"
    first, second = wait_until(
        lambda: (
            list(Execution.objects.filter(finished__isnull=False).order_by("attempt"))
            if Execution.objects.filter(finished__isnull=False).count() == 2
            else None
        ),
        timeout=5,
        what="both runs to end",
    )
    # The retry did not wait for the stuck run, and the stuck run's late 1 was dropped.
    assert second.started < first.finished
    assert job_of(result).return_value == 2


def test_quick_jobs_are_claimed_by_the_hundred_and_slow_ones_as_before(transactional_db):
    django_outbox.enqueue_many(tasks.noop, [((), {})] * 600)
    adaptive = Worker(queues=["default"], concurrency=2, burst=True)
    adaptive_stats = adaptive.run()
    django_outbox.enqueue_many(tasks.noop, [((), {})] * 600)
    fixed_stats = Worker(queues=["default"], concurrency=2, burst=True, batch_size=8).run()
    assert adaptive_stats.succeeded == fixed_stats.succeeded == 600
    # Quick jobs: above the default of 8 (about 100 at a no-op's 2 ms, 500 at 0.2 ms; on a
    # machine running four test runs at once, 22 was seen).
    assert adaptive.claim_size > 2 * 8
    # Claims and completions for a few batches, not 75 of each.
    assert adaptive_stats.statements * 4 < fixed_stats.statements

    for i in range(6):
        tasks.record_run.enqueue(f"slow-{i}", seconds=0.15)
    slow = Worker(queues=["slow"], concurrency=2, burst=True)
    slow.run()
    assert Execution.objects.count() == 6
    assert slow.claim_size == slow.batch_size == 8  # 0.15 s each: the default batch


def test_database_back_off_stays_within_a_quarter_lease_so_heartbeats_keep_leases(
    db, settings, caplog
):
    from django.db import OperationalError

    settings.OUTBOX = settings.OUTBOX | {"LEASE_SECONDS": 4.0, "HEARTBEAT_SECONDS": 0.5}
    worker = Worker(queues=["default"])

    def unreachable() -> None:
        raise OperationalError("server closed the connection unexpectedly")

    for _ in range(8):  # the pauses would grow to 10 s
        worker.db.ok_after = 0.0
        assert worker.db.run(unreachable) is None
    pauses = [float(r.getMessage().split("retrying in ")[1].split()[0]) for r in caplog.records
              if "retrying in" in r.getMessage()]  # fmt: skip
    assert pauses == [0.5] + [1.0] * 7  # never more than a quarter of the 4 s lease


def test_the_stop_line_counts_statements_per_run_with_two_decimals(run_worker, caplog):
    caplog.set_level(logging.INFO, "django_outbox.worker")
    for _ in range(3):
        tasks.noop.enqueue()
    stats = run_worker()
    (line,) = [r.getMessage() for r in caplog.records if " stopped: " in r.getMessage()]
    assert stats.finished == 3
    assert f"; {stats.statements} statements ({stats.statements / 3:.2f} per run)" in line
