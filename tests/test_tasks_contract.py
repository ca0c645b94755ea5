"""The ``django.tasks`` contract: a result read back says what was enqueued.

Whether it is read by ``get_result()``, by ``refresh()``, inside the run (the context's
``task_result``) or by a ``task_started`` / ``task_finished`` receiver, a job's TaskResult
equals, field by field, the one ``enqueue()`` returned: id, backend, status, the task (its
function, backend, queue, priority, ``run_after``, ``takes_context``), args, kwargs, and,
as the job runs, its timestamps, errors, worker ids and return value.

Each case runs with a second TASKS alias of OutboxBackend on the same database
("second"), as a site with two backends has it, and is run by a worker of that alias.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_outbox import webhooks, workflows
from django_outbox.compat import (
    TaskResult,
    TaskResultStatus,
    task_backends,
    task_finished,
    task_started,
)
from django_outbox.models import Job
from tests import tasks
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: What the contract defines of a TaskResult, compared one by one for a clear failure.
RESULT_FIELDS = (
    "id",
    "backend",
    "status",
    "args",
    "kwargs",
    "enqueued_at",
    "started_at",
    "last_attempted_at",
    "finished_at",
    "errors",
    "worker_ids",
)
TASK_FIELDS = ("func", "backend", "queue_name", "priority", "run_after", "takes_context")


def differences(read: TaskResult, expected: TaskResult) -> list[str]:
    """Each field of the contract where ``read`` is not ``expected``, as a line."""
    found = [
        f"{name}: {getattr(read, name)!r} != {getattr(expected, name)!r}"
        for name in RESULT_FIELDS
        if getattr(read, name) != getattr(expected, name)
    ]
    found += [
        f"task.{name}: {getattr(read.task, name)!r} != {getattr(expected.task, name)!r}"
        for name in TASK_FIELDS
        if getattr(read.task, name) != getattr(expected.task, name)
    ]
    succeeded = TaskResultStatus.SUCCESSFUL
    if read.status == expected.status == succeeded and read.return_value != expected.return_value:
        found.append(f"return_value: {read.return_value!r} != {expected.return_value!r}")
    return found


def assert_same(read: TaskResult, expected: TaskResult) -> None:
    assert differences(read, expected) == [], "\n".join(differences(read, expected))
    assert read == expected  # and nothing the list above leaves out


@pytest.fixture
def two_aliases(settings: Any) -> None:
    """TASKS["second"]: another OutboxBackend on the same database, with a queue q2."""
    settings.TASKS = settings.TASKS | {
        "second": {
            "BACKEND": "django_outbox.backend.OutboxBackend",
            "QUEUES": ["default", "q2"],
        }
    }


class Seen:
    """The results task_started and task_finished receivers were sent, by result id."""

    def __init__(self) -> None:
        self.started: dict[str, TaskResult] = {}
        self.finished: dict[str, TaskResult] = {}
        #: Each result as it was when it was sent (the finished one is the started one,
        #: brought up to date, as refresh() would).
        self.started_then: dict[str, dict[str, Any]] = {}

    def on_started(self, sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
        self.started[task_result.id] = task_result
        self.started_then[task_result.id] = {
            "status": task_result.status,
            "finished_at": task_result.finished_at,
            "sender": sender,
        }

    def on_finished(self, sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
        self.finished[task_result.id] = task_result


@pytest.fixture
def seen() -> Iterator[Seen]:
    watcher = Seen()
    task_started.connect(watcher.on_started)
    task_finished.connect(watcher.on_finished)
    yield watcher
    task_started.disconnect(watcher.on_started)
    task_finished.disconnect(watcher.on_finished)


def ran_as_enqueued(enqueued: TaskResult, seen: Seen) -> TaskResult:
    """Check a job that ran to success against the result its enqueue returned; return
    the result read back."""
    backend = task_backends[enqueued.backend]
    read = backend.get_result(enqueued.id)
    assert read.status == TaskResultStatus.SUCCESSFUL, read.errors
    # What the run's own context said of the job.
    as_run = read.return_value
    run_after = enqueued.task.run_after
    assert as_run == {
        "id": enqueued.id,
        "backend": enqueued.backend,
        "task_backend": enqueued.task.backend,
        "queue_name": enqueued.task.queue_name,
        "priority": enqueued.task.priority,
        "run_after": run_after.isoformat() if run_after is not None else None,
    }
    # refresh() of the enqueued result reads it back through its own task's backend.
    enqueued.refresh()
    assert_same(enqueued, read)
    assert_same(seen.finished[enqueued.id], read)
    started = seen.started[enqueued.id]
    assert started is seen.finished[enqueued.id]
    assert seen.started_then[enqueued.id]["status"] == TaskResultStatus.RUNNING
    assert seen.started_then[enqueued.id]["finished_at"] is None
    assert seen.started_then[enqueued.id]["sender"] is type(backend)
    return read


def test_a_result_read_back_through_its_alias_is_the_enqueued_one(two_aliases):
    run_after = timezone.now() + timedelta(hours=1)
    enqueued = tasks.echo.using(
        backend="second", queue_name="q2", priority=7, run_after=run_after
    ).enqueue(1, [2], three=3)
    read = task_backends["second"].get_result(enqueued.id)
    assert read.backend == "second"
    assert read.task.run_after == run_after
    assert_same(read, enqueued)
    enqueued.refresh()  # asks its own alias, which knows the job
    assert_same(enqueued, read)
    assert tasks.echo.using(backend="second").get_result(enqueued.id) == read


def test_an_alias_does_not_read_another_alias_job(two_aliases):
    from django_outbox.compat import TaskResultDoesNotExist

    enqueued = tasks.echo.using(backend="second").enqueue()
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(enqueued.id)


def test_a_job_stored_without_run_after_reads_back_without_one(two_aliases):
    enqueued = tasks.echo.using(backend="second", priority=-3).enqueue()
    assert enqueued.task.run_after is None
    read = task_backends["second"].get_result(enqueued.id)
    assert read.task.run_after is None
    assert_same(read, enqueued)


def test_a_run_sees_the_job_as_it_was_enqueued(two_aliases, run_worker, seen):
    run_after = timezone.now() - timedelta(seconds=1)
    enqueued = tasks.reports_its_result.using(
        backend="second", queue_name="q2", priority=7, run_after=run_after
    ).enqueue("a", b=2)
    run_worker(backend="second", queues=["q2"])
    read = ran_as_enqueued(enqueued, seen)
    assert read.task.run_after == run_after
    assert (read.args, read.kwargs) == (["a"], {"b": 2})
    assert read.worker_ids and read.started_at and read.finished_at


def test_a_retried_job_still_reads_back_its_run_after(two_aliases, run_worker):
    """run_at moves with each retry's backoff; the result keeps what was enqueued."""
    run_after = timezone.now() - timedelta(seconds=1)
    enqueued = tasks.always_fails.using(backend="second", run_after=run_after).enqueue("no")
    backend = task_backends["second"]

    def failed_for_good() -> bool:
        run_worker(backend="second", queues=["default"])  # leaves while a retry waits
        return backend.get_result(enqueued.id).status == TaskResultStatus.FAILED

    wait_until(failed_for_good, what="its three attempts")
    read = backend.get_result(enqueued.id)
    assert len(read.errors) == 3
    assert read.task.run_after == run_after
    assert Job.objects.get().run_at > run_after
    enqueued.refresh()
    assert_same(enqueued, read)


def test_enqueue_many_reads_back_as_enqueued(two_aliases, run_worker, seen):
    task = tasks.reports_its_result.using(backend="second", queue_name="q2", priority=4)
    enqueued = task.get_backend().enqueue_many(task, [((n,), {}) for n in range(3)])
    for result in enqueued:
        assert_same(task_backends["second"].get_result(result.id), result)
    run_worker(backend="second", queues=["q2"])
    for result in enqueued:
        ran_as_enqueued(result, seen)


def test_a_unique_job_enqueued_again_returns_the_first_as_enqueued(two_aliases, run_worker, seen):
    task = tasks.reports_its_result_once.using(backend="second", queue_name="q2", priority=5)
    first = task.enqueue()
    again = task.enqueue()
    assert again.id == first.id
    assert_same(again, first)
    run_worker(backend="second", queues=["q2"])
    ran_as_enqueued(first, seen)


def test_async_tasks_read_back_as_enqueued(two_aliases, run_worker, seen):
    from asgiref.sync import async_to_sync

    task = tasks.reports_its_result_async.using(backend="second", queue_name="q2", priority=2)
    enqueued = async_to_sync(task.aenqueue)(1)
    read = async_to_sync(task.aget_result)(enqueued.id)
    assert_same(read, enqueued)
    run_worker(backend="second", queues=["q2"])
    ran_as_enqueued(enqueued, seen)
    async_to_sync(enqueued.arefresh)()
    assert_same(enqueued, task_backends["second"].get_result(enqueued.id))


def test_workflow_steps_read_back_as_their_steps_were_built(run_worker, seen):
    first = tasks.reports_its_result.using(queue_name="reports", priority=3)
    run = workflows.chain(
        workflows.step(first, "one"), workflows.step(tasks.reports_its_result, "two")
    ).enqueue()
    run_worker()
    steps = workflows.get(run).steps
    assert [step.status for step in steps] == ["succeeded", "succeeded"]
    for step, task in zip(steps, [first, tasks.reports_its_result], strict=True):
        read = task.get_result(step.result_id)
        assert (read.task.queue_name, read.task.priority) == (task.queue_name, task.priority)
        assert read.return_value == {
            "id": step.result_id,
            "backend": "default",
            "task_backend": "default",
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": None,
        }
        assert_same(seen.finished[step.result_id], read)


def test_a_webhook_delivery_reads_back_as_its_job(receiver, run_worker, seen):
    webhooks.create_endpoint(receiver.url())
    webhooks.send("invoice.paid", {"id": 7})
    run_worker(queues=["webhooks"])
    job = Job.objects.get(queue="webhooks")
    (result_id,) = seen.finished
    read = task_backends[job.backend].get_result(result_id)
    assert read.status == TaskResultStatus.SUCCESSFUL
    assert (read.backend, read.task.queue_name, read.task.priority) == (
        job.backend,
        job.queue,
        job.priority,
    )
    assert_same(seen.finished[result_id], read)


def test_workflow_steps_of_the_second_alias_read_back_through_it(two_aliases, run_worker, seen):
    first = tasks.reports_its_result.using(backend="second", queue_name="q2", priority=6)
    second = tasks.reports_its_result.using(backend="second", priority=-1)
    run = workflows.chain(workflows.step(first, "one"), workflows.step(second, "two")).enqueue()
    run_worker(backend="second", queues=["q2", "default"])
    steps = workflows.get(run).steps
    assert [step.status for step in steps] == ["succeeded", "succeeded"]
    for step, task in zip(steps, [first, second], strict=True):
        read = task_backends["second"].get_result(step.result_id)
        assert read.backend == "second"
        assert (read.task.queue_name, read.task.priority) == (task.queue_name, task.priority)
        assert read.return_value == {
            "id": step.result_id,
            "backend": "second",
            "task_backend": "second",
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": None,
        }
        assert_same(seen.finished[step.result_id], read)
        assert_same(task.get_result(step.result_id), read)


def test_a_webhook_delivery_of_the_second_alias_reads_back_through_it(
    two_aliases, receiver, run_worker, seen, settings
):
    settings.OUTBOX = settings.OUTBOX | {
        "WEBHOOKS": settings.OUTBOX["WEBHOOKS"] | {"BACKEND": "second"}
    }
    webhooks.create_endpoint(receiver.url())
    webhooks.send("invoice.paid", {"id": 8})
    run_worker(backend="second", queues=["webhooks"])
    job = Job.objects.get(queue="webhooks")
    assert job.backend == "second"
    (result_id,) = seen.finished
    read = task_backends["second"].get_result(result_id)
    assert read.status == TaskResultStatus.SUCCESSFUL, read.errors
    assert (read.backend, read.task.backend, read.task.queue_name) == (
        "second",
        "second",
        "webhooks",
    )
    assert read.task.priority == job.priority
    assert_same(seen.finished[result_id], read)
    assert len(receiver.at("/hook")) == 1


def test_the_reproduction_of_the_report_with_runworker(two_aliases, start_worker, settings):
    """As the report had it: ``runworker --burst --backend second --queues q2`` in a
    process of its own (tests/settings.py adds the alias there too)."""
    run_after = timezone.now() - timedelta(seconds=1)
    enqueued = tasks.reports_its_result.using(
        backend="second", queue_name="q2", priority=7, run_after=run_after
    ).enqueue()
    worker = start_worker(
        "--burst", "--backend", "second", "--queues", "q2",
        extra_env={"OUTBOX_TEST_SECOND_ALIAS": "1"},
    )  # fmt: skip
    assert worker.wait() == 0, worker.log()
    read = task_backends["second"].get_result(enqueued.id)
    assert read.status == TaskResultStatus.SUCCESSFUL, worker.log()
    assert read.return_value["backend"] == "second"
    assert read.return_value["queue_name"] == "q2"
    assert read.return_value["priority"] == 7
    assert read.return_value["run_after"] == run_after.isoformat()
    enqueued.refresh()
    assert_same(enqueued, read)
