"""Batches (Sidekiq's): a set of jobs with callbacks that run once, when every job has
succeeded (``on_success``) or has finished whatever its outcome (``on_complete``); jobs may
be added while the batch runs, from its own jobs or from anywhere.

A batch is a workflow whose callbacks wait for every member. Adding a member counts each
callback up before it can be released: the callbacks' step rows are updated first, which
waits for a completion that is releasing them and takes their row locks in the order a
completion takes them; then, if ``on_complete`` was released meanwhile, the batch has
finished and the add is refused, leaving nothing behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, router, transaction
from django.db.models import F
from django.utils import timezone

from django_outbox.compat import TaskContext
from django_outbox.exceptions import OutboxError
from django_outbox.jobs.enqueue import build_jobs, insert_steps
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import (
    Job,
    JobStatus,
    Receives,
    Workflow,
    WorkflowEdge,
    WorkflowStatus,
    WorkflowStep,
)
from django_outbox.workflows.building import Composite, Step, checked_elements
from django_outbox.workflows.plan import Plan
from django_outbox.workflows.runs import Run, WorkflowDoesNotExist, lock_callbacks
from django_outbox.workflows.writing import key_held, unique_keys


class BatchClosed(OutboxError):
    """The batch has finished (its ``on_complete`` has been released): nothing can join."""


class BatchNotStarted(OutboxError):
    """The batch waits for the steps before it in its workflow: jobs join it once it runs."""


class Batch(Composite):
    """Jobs side by side, with callbacks; see ``workflows.batch()``. Enqueued on its own,
    or as a step of a chain or a ``Workflow`` (one batch a workflow)."""

    def __init__(
        self, members: Sequence[Step], on_success: Step | None, on_complete: Step | None
    ) -> None:
        self.members = _steps("a batch", members)
        for name, callback in (("on_success", on_success), ("on_complete", on_complete)):
            if callback is not None and not isinstance(callback, Step):
                raise TypeError(
                    f"{name} takes a step (workflows.step(task, ...)), not {callback!r}"
                )
        self.on_success = on_success
        self.on_complete = on_complete

    def place(self, plan: Plan, after: list[int], passing: Receives) -> tuple[list[int], Receives]:
        """Its members side by side after ``after`` (each takes what a group's member
        takes), then its callbacks, which wait for every member. What follows waits for
        its last callback, and gets its result; without callbacks, for every member, and
        gets their results as a list, the members added later too."""
        members: list[int] = []
        for member in self.members:
            member_exits, _ = member.place(plan, after, passing)
            members += member_exits
        plan.mark_batch(members)
        callbacks = []
        if self.on_success is not None:
            callbacks.append(plan.add(self.on_success, members, Receives.NOTHING))
        if self.on_complete is not None:
            callbacks.append(plan.add(self.on_complete.always(), members, Receives.NOTHING))
        if callbacks:
            return callbacks[-1:], Receives.ONE
        return members, Receives.LIST

    def enqueue(self, name: str = "") -> Run:
        """Write the batch in the current transaction; its run's id names it to
        ``add_to_batch()``. Its result is ``on_complete``'s, else ``on_success``'s, else the
        list of its first members' results."""
        return super().enqueue(name)


def batch(*members: Step, on_success: Step | None = None, on_complete: Step | None = None) -> Batch:
    """A batch of ``members`` with optional callbacks: ``on_success`` runs once every job
    has succeeded (never, if one failed); ``on_complete`` once every job has finished.
    Callbacks read the jobs' results in ``context.upstream_results``."""
    return Batch(members, on_success, on_complete)


def add_to_batch(batch_id: int | Run | TaskContext, *members: Step) -> list[Any]:
    """Add ``members`` to a running batch, in the current transaction; returns their
    results (``TaskResult``). ``batch_id``: the batch's id or run, or the context of one of
    its jobs (``takes_context=True``), which adds to that job's own batch.

    Raises BatchClosed once the batch has finished, WorkflowDoesNotExist for an unknown
    id, and ValueError for a workflow that is not a batch."""
    steps = _steps("add_to_batch()", members)
    keys = unique_keys(steps)
    using = router.db_for_write(Job)
    pk = _batch_id(batch_id, using)
    try:
        return _add(pk, steps, keys, using)
    except IntegrityError:
        if not any(keys):
            raise
        raise key_held(keys, f"Nothing was added to batch {pk}") from None


def _add(pk: int, steps: list[Step], keys: list[str | None], using: str) -> list[Any]:
    with transaction.atomic(using=using):
        workflow = Workflow.objects.using(using).filter(pk=pk).first()
        if workflow is None:
            raise WorkflowDoesNotExist(f"No workflow {pk!r}.")
        if not workflow.is_batch:
            raise ValueError(f"Workflow {pk} is not a batch: only a batch takes new jobs.")
        # Lock the callbacks' rows first, then count them up. This waits for a completion
        # that holds them (it releases them in the same transaction), and holds them from
        # now on: no completion releases a callback until this commits. So their
        # statuses, read next without a lock, are final; and the workflow's row comes
        # last, in the order a completion and retry() take them (runs.lock_callbacks).
        callbacks = lock_callbacks(using, workflow)
        callback_ids = [job for job, _ in callbacks]
        WorkflowStep.objects.using(using).filter(job_id__in=callback_ids).update(
            waiting_on=F("waiting_on") + len(steps)
        )
        statuses = dict(
            Job.objects.using(using).filter(id__in=callback_ids).values_list("id", "status")
        )
        locked = Workflow.objects.using(using).select_for_update().get(pk=pk)
        # A callback released (neither waiting nor taken down) has seen the batch end.
        released = any(
            statuses.get(job) not in (JobStatus.WAITING, JobStatus.CANCELLED)
            for job, _always in callbacks
        )
        over = locked.finished_at is not None or locked.status == WorkflowStatus.CANCELLED
        closed = released or over
        if closed:
            raise BatchClosed(f"Batch {pk} has finished: no job can join it now.")
        if not _started(using, locked, callback_ids):
            raise BatchNotStarted(
                f"Batch {pk} waits for the steps before it in its workflow: jobs join it once "
                "it runs (from one of its own jobs, say). Nothing was added."
            )
        now = timezone.now()
        jobs = build_jobs([(step.task, step.args, step.kwargs) for step in steps], now)
        calls = []
        for step, key, job in zip(steps, keys, jobs, strict=True):
            job.workflow_id, job.dedup_key = pk, key
            calls.append((step.task, job))
        results = insert_steps(calls)
        first = locked.steps_total
        WorkflowStep.objects.using(using).bulk_create(
            [
                WorkflowStep(job_id=job.pk, workflow_id=pk, position=first + i, waiting_on=0)
                for i, (_, job) in enumerate(calls)
            ]
        )
        # An edge to every callback, a taken-down on_success too (a retry counts its parents
        # by their edges), in the order the jobs joined.
        WorkflowEdge.objects.using(using).bulk_create(
            [
                WorkflowEdge(
                    workflow_id=pk, parent_id=job.pk, child_id=callback, position=first + i
                )
                for i, (_, job) in enumerate(calls)
                for callback in callback_ids
            ]
        )
        Workflow.objects.using(using).filter(pk=pk).update(
            steps_total=F("steps_total") + len(steps), steps_left=F("steps_left") + len(steps)
        )
    return results


def _started(using: str, workflow: Workflow, waiters: list[int]) -> bool:
    """Whether the batch's members have been let go: in a chain they wait for what comes
    before the batch, and all are let go at once, so one of them tells. A member is a
    parent of the first step that waits for the batch, or without one (the batch ends its
    workflow, with no callback), one of the workflow's last steps."""
    job: int | None
    if waiters:
        job = (
            WorkflowEdge.objects.using(using)
            .filter(child_id=min(waiters))
            .order_by("position")
            .values_list("parent_id", flat=True)
            .first()
        )
    else:
        job = (
            WorkflowStep.objects.using(using)
            .filter(workflow_id=workflow.pk, position__in=workflow.result_positions[:1])
            .values_list("job_id", flat=True)
            .first()
        )
    if job is None:
        return False
    status = Job.objects.using(using).filter(pk=job).values_list("status", flat=True).first()
    return status is not None and status != JobStatus.WAITING


def _batch_id(given: int | Run | TaskContext, using: str) -> int:
    if isinstance(given, Run):
        return given.id
    if isinstance(given, TaskContext):
        job_id, _token = parse_result_id(given.task_result.id)
        found = Job.objects.using(using).filter(pk=job_id).values_list("workflow_id", flat=True)
        workflow = found.first()
        if workflow is None:
            raise ValueError(f"Job {job_id} is not a job of a batch.")
        return int(workflow)
    if isinstance(given, bool) or not isinstance(given, int):
        raise TypeError(f"add_to_batch() takes a batch's id, run or job context, not {given!r}")
    return given


def _steps(where: str, members: Sequence[Any]) -> list[Step]:
    found = checked_elements(where, members)
    for member in found:
        if not isinstance(member, Step):
            raise TypeError(f"{where} takes steps (workflows.step(task, ...)), not {member!r}")
    return [m for m in found if isinstance(m, Step)]
