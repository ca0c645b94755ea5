"""Workflows: chains, groups, chords and DAGs, run by real workers on the suite's database."""

from __future__ import annotations

import django
import pytest
from django.db import transaction

from django_outbox import workflows
from django_outbox.models import Job, JobStatus, Workflow, WorkflowEdge, WorkflowStep
from tests import tasks
from tests.models import Once


@pytest.mark.django_db(transaction=True)
def test_a_chain_passes_each_result_to_the_next_step(run_worker):
    run = workflows.chain(
        workflows.step(tasks.add, 1, 2),
        workflows.step(tasks.double),
        workflows.step(tasks.add, 10),
    ).enqueue()
    assert run.status == "running"
    assert [s.status for s in run.steps] == ["queued", "waiting", "waiting"]
    run_worker()
    done = workflows.get(run.id)
    assert (done.status, done.result) == ("succeeded", (1 + 2) * 2 + 10)
    assert [s.result for s in done.steps] == [3, 6, 16]
    assert done.finished and [s.waits_for for s in done.steps] == [(), (0,), (1,)]


@pytest.mark.django_db
def test_the_run_enqueue_returns_is_the_run_read_back():
    run = workflows.chord(
        workflows.group(workflows.step(tasks.add, 1, 2), workflows.step(tasks.double, 4)),
        workflows.step(tasks.add, 10).always(),
    ).enqueue("read back")
    read = workflows.get(run.id)
    # Its steps are made when first read: the same as those read from the database, as a
    # sequence (length, slices, equality with the tuple) and as a whole run.
    assert run == read and len(run.steps) == 3
    assert run.steps == read.steps and read.steps == run.steps and run.steps == tuple(read.steps)
    assert run.steps[1:] == read.steps[1:] and run.steps[-1].always
    assert [s.waits_for for s in run.steps] == [(), (), (0, 1)]
    assert [s.task_path for s in run.steps] == [s.task_path for s in read.steps]
    assert run.steps[0].result_id == tasks.add.get_result(run.steps[0].result_id).id


@pytest.mark.django_db(transaction=True)
def test_an_immutable_step_takes_no_result_from_the_chain(run_worker):
    run = workflows.chain(
        workflows.step(tasks.add, 1, 2), workflows.step(tasks.add, 5, 5).immutable()
    ).enqueue()
    run_worker()
    assert workflows.get(run.id).result == 10


@pytest.mark.django_db(transaction=True)
def test_a_group_runs_side_by_side_and_its_result_is_the_list_in_order(run_worker):
    run = workflows.group(*(workflows.step(tasks.double, n) for n in range(5))).enqueue()
    assert {s.status for s in run.steps} == {"queued"}
    run_worker(concurrency=4)
    done = workflows.get(run.id)
    assert (done.status, done.result) == ("succeeded", [0, 2, 4, 6, 8])


@pytest.mark.django_db(transaction=True)
def test_a_chord_calls_back_once_with_the_members_results_in_order(run_worker):
    members = [workflows.step(tasks.double, n) for n in (3, 1, 2)]
    run = workflows.chord(members, workflows.step(tasks.total, plus=100)).enqueue()
    # An immutable callback gets its own arguments only, and reads the results in context.
    seen = workflows.chord(members, workflows.step(tasks.upstream_seen, "cb").immutable())
    seen_run = seen.enqueue()
    run_worker(concurrency=3)
    done = workflows.get(run.id)
    assert (done.status, done.result) == ("succeeded", 6 + 2 + 4 + 100)
    assert workflows.get(seen_run.id).result == {"label": "cb", "upstream": [6, 2, 4]}


@pytest.mark.django_db(transaction=True)
def test_nested_blocks_compose_as_celerys_canvas_does(run_worker):
    # add(1, 1) -> [double, double] -> total(list) -> group(double, add(100))
    run = workflows.chain(
        workflows.step(tasks.add, 1, 1),
        workflows.group(workflows.step(tasks.double), workflows.step(tasks.double)),
        workflows.step(tasks.total),
        workflows.group(workflows.step(tasks.double), workflows.step(tasks.add, 100)),
    ).enqueue()
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert (done.status, done.result) == ("succeeded", [16, 108])


@pytest.mark.django_db(transaction=True)
def test_a_dag_step_waits_for_all_its_parents_and_reads_their_results(run_worker):
    wf = workflows.Workflow(name="report")
    a = wf.add(workflows.step(tasks.add, 1, 2))
    b = wf.add(workflows.step(tasks.add, 3, 4))
    c = wf.add(workflows.step(tasks.double, 5), after=[a])
    d = wf.add(workflows.step(tasks.upstream_seen, "d"), after=[c, b])
    run = wf.enqueue()
    assert [s.waits_for for s in run.steps] == [(), (), (0,), (2, 1)]
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert done.name == "report" and done.status == "succeeded"
    assert done.result == {"label": "d", "upstream": [10, 7]}
    assert d.exits == (3,)


@pytest.mark.django_db(transaction=True)
def test_a_workflow_rolled_back_with_its_transaction_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        workflows.chord(
            [workflows.step(tasks.double, 1), workflows.step(tasks.double, 2)],
            workflows.step(tasks.total),
        ).enqueue()
        raise RuntimeError("the view failed")
    assert not Workflow.objects.exists() and not Job.objects.exists()
    assert not WorkflowStep.objects.exists() and not WorkflowEdge.objects.exists()


def test_building_a_workflow_touches_no_database():
    # No django_db mark: pytest-django fails any database access in this test.
    wf = workflows.Workflow()
    a = wf.add(workflows.chain(workflows.step(tasks.add, 1, 2), workflows.step(tasks.double)))
    wf.add(workflows.step(tasks.total, [1]), after=[a])
    workflows.chord([workflows.step(tasks.double, 1)], workflows.step(tasks.total))
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        wf.enqueue()  # the test's own check that the guard is on


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: workflows.step(print, 1), "takes a task"),
        (lambda: workflows.step(tasks.add, object()), "JSON-serialisable"),
        (lambda: workflows.chain(), "at least one step"),
        (lambda: workflows.group(workflows.step(tasks.noop), 3), "not 3"),
        (lambda: workflows.chord("ab", workflows.step(tasks.noop)), "list of steps"),
        (lambda: workflows.Workflow().enqueue(), "no steps"),
        (
            lambda: workflows.Workflow().add(
                workflows.step(tasks.noop),
                after=[workflows.Workflow().add(workflows.step(tasks.noop))],
            ),
            "this workflow's add()",
        ),
    ],
)
def test_a_badly_built_workflow_is_a_clear_error(build, message):
    with pytest.raises((TypeError, ValueError)) as caught:
        build()
    assert message in str(caught.value)


@pytest.mark.django_db(transaction=True)
def test_a_failed_step_takes_down_what_waits_for_it_but_not_its_clean_up(run_worker):
    wf = workflows.Workflow()
    ok = wf.add(workflows.step(tasks.add, 1, 1))
    bad = wf.add(workflows.step(tasks.fails_for_good, "boom"))
    below = wf.add(workflows.step(tasks.double, 1), after=[bad, ok])
    wf.add(workflows.step(tasks.double, 2), after=[below])
    wf.add(workflows.step(tasks.upstream_seen, "clean-up"), after=[below, ok], always=True)
    run = wf.enqueue()
    run_worker(concurrency=2)
    done = workflows.get(run.id)
    assert done.status == "failed" and done.finished and done.result is None
    statuses = [s.status for s in done.steps]
    assert statuses == ["succeeded", "failed", "upstream_failed", "upstream_failed", "succeeded"]
    assert done.steps[4].result == {"label": "clean-up", "upstream": [None, 2]}
    assert "failed or was cancelled" in done.steps[2].error
    # Not run: never claimed, no attempt spent.
    not_run = Job.objects.filter(pk__in=[done.steps[2].job_id, done.steps[3].job_id])
    assert {(j.status, j.attempts) for j in not_run} == {(JobStatus.CANCELLED, 0)}


@pytest.mark.django_db(transaction=True)
def test_retrying_a_failed_workflow_reruns_the_failed_steps_and_those_below_only(run_worker):
    wf = workflows.Workflow()
    first = wf.add(workflows.step(tasks.record_once, "first"))
    flaky = wf.add(workflows.step(tasks.fails_for_good, "boom"), after=[first])
    wf.add(workflows.step(tasks.double, 4), after=[flaky])
    run = wf.enqueue()
    run_worker(queues=["default", "slow"])
    assert workflows.get(run.id).status == "failed"
    with pytest.raises(workflows.WorkflowNotRetryable):
        workflows.retry(workflows.chain(workflows.step(tasks.noop)).enqueue())  # still running
    # The task is mended: the failed step now runs something that works.
    flaky_job = Job.objects.get(pk=run.steps[1].job_id)
    flaky_job.task_path = "tests.tasks.noop"
    flaky_job.args = []
    flaky_job.save()
    assert workflows.retry(run.id) == 2
    assert workflows.get(run.id).status == "running"
    run_worker()
    done = workflows.get(run.id)
    assert (done.status, [s.status for s in done.steps]) == ("succeeded", ["succeeded"] * 3)
    # record_once would fail a second run: the step that succeeded ran once.
    assert done.steps[0].result == "first" and done.result == 8


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_workflow_cancels_its_pending_steps_and_asks_running_ones_to_stop(
    start_worker,
):
    from tests.conftest import wait_until

    run = workflows.chain(
        workflows.step(tasks.reports_progress_then_waits, 30),
        workflows.step(tasks.noop).immutable(),
        workflows.step(tasks.noop).always().immutable(),
    ).enqueue()
    worker = start_worker("--concurrency", "2")
    wait_until(
        lambda: workflows.get(run.id).steps[0].progress is not None, what="the first step to run"
    )
    assert str(workflows.get(run.id).steps[0].progress) == "3 of 10 (three of ten)"
    assert workflows.cancel(run.id) == "cancelled"
    done = wait_until(lambda: (r := workflows.get(run.id)).finished and r, what="it to finish")
    assert done.status == "cancelled"
    assert [s.status for s in done.steps] == ["succeeded", "cancelled", "cancelled"]
    assert done.steps[0].result == "stopped"  # it saw the request and returned
    assert workflows.cancel(run.id) == "cancelled"
    worker.stop()


@pytest.mark.django_db(transaction=True)
def test_progress_shows_in_the_result_and_the_workflow(run_worker):
    result = tasks.reports_progress.enqueue(5)
    run_worker()
    fetched = tasks.reports_progress.get_result(result.id)
    assert (fetched.progress.done, fetched.progress.total) == (5, 5)
    assert fetched.progress.note == "item 5" and fetched.progress.fraction == 1.0


@pytest.mark.django_db(transaction=True)
def test_an_unknown_workflow_is_a_clear_error():
    with pytest.raises(workflows.WorkflowDoesNotExist, match="No workflow 12345"):
        workflows.get(12345)
    with pytest.raises(workflows.WorkflowDoesNotExist):
        workflows.cancel(12345)
    for bad in ("12", None, True):
        with pytest.raises(TypeError, match="named by its id"):
            workflows.get(bad)
    with pytest.raises(TypeError, match="named by its id"):
        workflows.retry("x")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    django.VERSION < (6, 0),
    reason="run in the Django 6.1 row only: about 45 s per database, and CI must stay under "
    "25 minutes (the 5.2 row tests the same engine code)",
)
def test_a_chord_of_10000_members_on_two_worker_processes_calls_back_exactly_once(start_worker):
    from tests.conftest import wait_until

    members = [workflows.step(tasks.noop) for _ in range(10_000)]
    callback = workflows.step(tasks.record_once, "the callback").immutable()
    run = workflows.chord(members, callback).enqueue()
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    done = wait_until(
        lambda: (r := workflows.get(run.id)).finished and r, timeout=240, what="the chord"
    )
    assert (done.status, done.result) == ("succeeded", "the callback")
    callback_job = Job.objects.get(pk=done.steps[-1].job_id)
    # record_once fails a second run (a unique row): one run, one attempt.
    assert (callback_job.attempts, callback_job.status) == (1, JobStatus.SUCCEEDED)
    assert Once.objects.filter(key="the callback").count() == 1
    # Both processes finished members: the last ones may have ended on either.
    ran_on = Job.objects.exclude(pk=callback_job.pk).values_list("worker_ids", flat=True)
    assert len({ids[0].rsplit(":", 1)[0] for ids in ran_on}) == 2
    for worker in workers:
        worker.stop()


@pytest.mark.django_db(transaction=True)
def test_staff_see_a_workflows_steps_and_retry_it_from_the_admin(admin_client, run_worker):
    wf = workflows.Workflow(name="nightly report")
    a = wf.add(workflows.step(tasks.add, 2, 3))
    bad = wf.add(workflows.step(tasks.fails_for_good, "no data"), after=[a])
    wf.add(workflows.step(tasks.double, 1), after=[bad])
    run = wf.enqueue()
    run_worker()
    listing = admin_client.get("/admin/django_outbox/workflow/").content.decode()
    assert "nightly report" in listing and "failed" in listing and "3 of 3" in listing
    page = admin_client.get(f"/admin/django_outbox/workflow/{run.id}/change/").content.decode()
    assert "upstream failed" in page and "ValueError: no data" in page
    assert f"/admin/django_outbox/job/{run.steps[1].job_id}/change/" in page
    job_page = admin_client.get(f"/admin/django_outbox/job/{run.steps[1].job_id}/change/")
    assert f"workflow #{run.id}" in job_page.content.decode()

    response = admin_client.post(
        "/admin/django_outbox/workflow/",
        {"action": "retry_workflows", "_selected_action": [run.id]},
        follow=True,
    )
    assert "Steps to run again: 2." in response.content.decode()
    assert [s.status for s in workflows.get(run.id).steps] == ["succeeded", "queued", "waiting"]
    again = admin_client.post(
        "/admin/django_outbox/workflow/",
        {"action": "retry_workflows", "_selected_action": [run.id]},
        follow=True,
    ).content.decode()
    assert "only a finished workflow that failed or was cancelled can be retried" in again
    admin_client.post(
        "/admin/django_outbox/workflow/",
        {"action": "cancel_workflows", "_selected_action": [run.id]},
    )
    assert workflows.get(run.id).status == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_retention_prunes_a_finished_workflow_whole_and_never_a_running_ones_steps(run_worker):
    from datetime import timedelta

    from django.utils import timezone

    from django_outbox import retention

    old = workflows.chain(workflows.step(tasks.add, 1, 2), workflows.step(tasks.double)).enqueue()
    live = workflows.Workflow()
    first = live.add(workflows.step(tasks.add, 5, 5))
    live.add(workflows.step(tasks.upstream_seen, "later"), after=[first])
    live_run = live.enqueue()
    lone = tasks.add.enqueue(1, 1)
    run_worker()
    # The live workflow as it stood before its last step ran: that step still waiting.
    Job.objects.filter(pk=live_run.steps[1].job_id).update(status=JobStatus.WAITING)
    Workflow.objects.filter(pk=live_run.id).update(status="running", finished_at=None, steps_left=1)
    later = timezone.now() + timedelta(days=8)
    assert retention.prune(timedelta(days=7), dry_run=True, now=later).counts["workflows"] == 1
    pruned = retention.prune(timedelta(days=7), now=later)
    assert (pruned.counts["workflows"], pruned.counts["jobs"]) == (1, 2 + 1)
    assert not Workflow.objects.filter(pk=old.id).exists()
    assert not WorkflowStep.objects.filter(workflow_id=old.id).exists()
    assert not WorkflowEdge.objects.filter(workflow_id=old.id).exists()
    assert not Job.objects.filter(pk__in=[s.job_id for s in old.steps]).exists()
    assert not Job.objects.for_result(lone.id).exists()
    # The live workflow's finished first step stays: its waiting step will read it.
    assert workflows.get(live_run.id).steps[0].result == 10


@pytest.mark.django_db(transaction=True)
def test_a_steps_unique_key_is_held_from_its_enqueue_and_a_held_key_refuses_the_workflow(
    run_worker,
):
    run = workflows.chain(
        workflows.step(tasks.noop), workflows.step(tasks.rebuild_index).immutable()
    ).enqueue()
    waiting = run.steps[1]
    assert waiting.status == "waiting"
    # The waiting step holds the key: a plain enqueue finds it, as it finds a queued holder.
    assert tasks.rebuild_index.enqueue().id == waiting.result_id
    with transaction.atomic():
        tasks.add.enqueue(1, 1)  # the caller's own work in the same transaction
        with pytest.raises(workflows.UniqueKeyHeld) as caught:
            workflows.group(
                workflows.step(tasks.noop), workflows.step(tasks.rebuild_index)
            ).enqueue()
        assert f"by job #{waiting.job_id} (waiting)" in str(caught.value)
    assert Workflow.objects.count() == 1  # nothing of the refused one, and the add kept
    assert Job.objects.filter(task_path="tests.tasks.add").count() == 1
    with pytest.raises(ValueError, match="Two steps have the unique key"):
        workflows.group(
            workflows.step(tasks.rebuild_index), workflows.step(tasks.rebuild_index)
        ).enqueue()
    run_worker()
    assert workflows.get(run.id).status == "succeeded"
    # Finished, it frees its key.
    assert workflows.chain(workflows.step(tasks.rebuild_index)).enqueue().status == "running"


@pytest.mark.django_db
def test_a_workflow_of_thousands_of_steps_is_written_batch_by_batch_in_order():
    """Its jobs go a batch at a time, each made while the one before is written: every
    step row names its own job, and the callback waits for every member, in order."""
    members = 2345
    run = workflows.chord(
        workflows.group(*(workflows.step(tasks.double, n) for n in range(members))),
        workflows.step(tasks.echo),
    ).enqueue("big")
    steps = dict(WorkflowStep.objects.filter(workflow_id=run.id).values_list("position", "job"))
    assert len(steps) == members + 1
    args = dict(Job.objects.filter(workflow_id=run.id).values_list("pk", "args"))
    assert [args[steps[n]] for n in range(members)] == [[n] for n in range(members)]
    assert [s.job_id for s in run.steps] == [steps[n] for n in range(members + 1)]
    callback = steps[members]
    parents = (
        WorkflowEdge.objects.filter(child_id=callback).order_by("position").values_list("parent")
    )
    assert [p for (p,) in parents] == [steps[n] for n in range(members)]
    assert Job.objects.get(pk=callback).status == JobStatus.WAITING
    assert Job.objects.filter(workflow_id=run.id, status=JobStatus.QUEUED).count() == members


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("held_at", [3, 1700], ids=["first batch", "second batch"])
def test_a_held_key_in_any_batch_refuses_the_whole_workflow(held_at):
    holder = tasks.build_report.enqueue(held_at)
    steps = [workflows.step(tasks.build_report, n) for n in range(2500)]
    with transaction.atomic():
        with pytest.raises(workflows.UniqueKeyHeld, match=f"'report-{held_at}' by job #"):
            workflows.group(*steps).enqueue()
        tasks.add.enqueue(1, 1)  # the caller's transaction goes on
    assert Workflow.objects.count() == 0 and WorkflowStep.objects.count() == 0
    assert list(Job.objects.values_list("task_path", flat=True).order_by("pk")) == [
        "tests.tasks.build_report",
        "tests.tasks.add",
    ]
    assert tasks.build_report.get_result(holder.id).status == "READY"


@pytest.mark.django_db
def test_run_jobs_follow_runs_a_whole_workflow_inside_the_tests_transaction():
    from django_outbox.testing import run_jobs

    run = workflows.chord(
        [workflows.step(tasks.double, 1), workflows.step(tasks.double, 2)],
        workflows.step(tasks.total),
    ).enqueue()
    results = run_jobs(follow=True)
    assert [r.return_value for r in results] == [2, 4, 6]
    assert workflows.get(run.id).result == 6


@pytest.mark.parametrize(
    ("done", "total", "note", "message"),
    [
        (-1, 10, "", "0 or more"),
        ("3", 10, "", "must be a number"),
        (True, None, "", "must be a number"),
        (1, float("nan"), "", "finite"),
        (1, 2, 3, "note must be a string"),
    ],
)
def test_a_bad_progress_report_is_a_clear_error(done, total, note, message):
    from django_outbox.jobs.progress import checked

    with pytest.raises(ValueError, match=message):
        checked(done, total, note)


def test_a_long_progress_note_is_cut():
    from django_outbox.jobs.progress import NOTE_MAX, checked

    report = checked(1, 2, "x" * 500)
    assert len(report.note) == NOTE_MAX and report.note.endswith("…")
    assert checked(2.5).amount == "2.5" and checked(3, 4).fraction == 0.75


@pytest.mark.django_db(transaction=True)
def test_the_admin_shows_a_running_jobs_progress(admin_client, start_worker):
    from tests.conftest import wait_until

    result = tasks.reports_progress_then_waits.enqueue(30)
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: Job.objects.for_result(result.id).get().progress, what="a report")
    pk = Job.objects.for_result(result.id).get().pk
    listing = admin_client.get("/admin/django_outbox/job/").content.decode()
    assert "· 3 of 10" in listing
    page = admin_client.get(f"/admin/django_outbox/job/{pk}/change/").content.decode()
    assert "3 of 10 (three of ten)" in page
    from django_outbox import cancel

    cancel(result)
    wait_until(lambda: Job.objects.get(pk=pk).status != JobStatus.RUNNING, what="it to stop")
    worker.stop()


@pytest.mark.django_db(transaction=True)
def test_a_polling_worker_runs_a_released_step_at_once_not_at_its_next_poll(settings):
    """A worker without wake-ups looks again as soon as it stores steps that ended: the
    steps they queued do not wait for its next poll (30 s here)."""
    import threading

    from django_outbox.worker import Worker
    from django_outbox.worker.process import start_in_thread
    from tests.conftest import stop_pool, wait_until

    settings.OUTBOX = settings.OUTBOX | {"WAKE": "poll", "POLL_INTERVAL": 30.0}
    run = workflows.chain(
        workflows.step(tasks.add, 1, 1), workflows.step(tasks.double), workflows.step(tasks.double)
    ).enqueue()
    worker = Worker(queues=["default"], concurrency=2)
    thread: threading.Thread = start_in_thread(worker)  # its first look finds the first step
    try:
        assert worker.ready.wait(15)
        done = wait_until(lambda: (r := workflows.get(run.id)).finished and r, timeout=20)
        assert done.result == 8
    finally:
        worker.request_stop("test done")
        thread.join(20)
        stop_pool(worker.pool)


@pytest.mark.django_db(transaction=True)
def test_a_step_keeps_its_tasks_options():
    run = workflows.chain(
        workflows.step(tasks.email.using(priority=7), "a@example.com"),
        workflows.step(tasks.fails_for_good.using(queue_name="reports"), "x").immutable(),
    ).enqueue()
    first, second = (Job.objects.get(pk=s.job_id) for s in run.steps)
    assert (first.queue, first.priority, first.max_attempts) == ("emails", 7, 3)
    assert (second.queue, second.max_attempts, second.status) == ("reports", 1, "waiting")


@pytest.mark.django_db(transaction=True)
def test_a_retry_that_would_take_a_held_unique_key_is_refused_and_changes_nothing(run_worker):
    run = workflows.chain(
        workflows.step(tasks.fails_for_good, "x"), workflows.step(tasks.rebuild_index).immutable()
    ).enqueue()
    run_worker()
    assert workflows.get(run.id).status == "failed"
    holder = tasks.rebuild_index.enqueue()  # the key is free again: another job takes it
    with pytest.raises(workflows.WorkflowNotRetryable, match="unique key is held"):
        workflows.retry(run.id)
    assert [s.status for s in workflows.get(run.id).steps] == ["failed", "upstream_failed"]
    assert Job.objects.for_result(holder.id).get().status == JobStatus.QUEUED


@pytest.mark.django_db(transaction=True)
def test_a_report_inside_the_tasks_own_transaction_is_not_written(run_worker):
    result = tasks.reports_inside_a_transaction.enqueue()
    run_worker()
    fetched = tasks.reports_inside_a_transaction.get_result(result.id)
    assert fetched.return_value == "done" and fetched.progress is None
