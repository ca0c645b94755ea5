"""A workflow as its user sees it (``workflows.get()``), and steering one: cancel, retry."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, overload

from django.db import IntegrityError, router, transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from django_outbox.exceptions import OutboxError
from django_outbox.jobs import steps
from django_outbox.jobs.progress import Progress
from django_outbox.jobs.returning import update_returning
from django_outbox.lib.resultids import result_id
from django_outbox.models import (
    Job,
    JobStatus,
    Workflow,
    WorkflowEdge,
    WorkflowStatus,
    WorkflowStep,
)
from django_outbox.wake.notify import notify_on_commit
from django_outbox.workflows.plan import Node

#: A step's status when it was not run because a step above it failed.
UPSTREAM_FAILED = "upstream_failed"


class WorkflowDoesNotExist(OutboxError, LookupError):
    """No workflow has this id (it never committed, or retention removed it)."""


class WorkflowNotRetryable(OutboxError):
    """Only a finished workflow that failed or was cancelled can be retried."""


@dataclass(frozen=True, slots=True)
class StepState:
    position: int
    job_id: int
    #: The step's job's result id: ``task.get_result()`` takes it.
    result_id: str
    task_path: str
    #: waiting, queued, running, succeeded, failed, cancelled, or upstream_failed (not run
    #: because a step it waits for failed).
    status: str
    #: Its return value once it succeeded; None before.
    result: Any
    #: The last line of its last error, if it has one.
    error: str | None
    progress: Progress | None
    #: Positions of the steps it waits for.
    waits_for: tuple[int, ...]
    #: It runs even if the steps it waits for failed (a clean-up step).
    always: bool


class Steps(Sequence[StepState]):
    """A run's steps, in order, made when first read: the run a workflow's ``enqueue()``
    returns has one per step, and its caller often reads only the run's id. Compares
    equal to the tuple of the same steps."""

    __slots__ = ("_make", "_states")

    def __init__(self, make: Callable[[], tuple[StepState, ...]]) -> None:
        self._make: Callable[[], tuple[StepState, ...]] | None = make
        self._states: tuple[StepState, ...] = ()

    def _all(self) -> tuple[StepState, ...]:
        if self._make is not None:
            self._states, self._make = self._make(), None
        return self._states

    @overload
    def __getitem__(self, index: int) -> StepState: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[StepState, ...]: ...
    def __getitem__(self, index: int | slice) -> StepState | tuple[StepState, ...]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[StepState]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Steps):
            other = other._all()
        return self._all() == other

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    name: str
    #: running, succeeded, failed (a step failed: it may still have steps running, see
    #: ``finished``) or cancelled.
    status: str
    created_at: datetime
    finished_at: datetime | None
    steps: Sequence[StepState]
    #: The last step's return value (a list of them, for a group or several last steps),
    #: once the workflow succeeded; None before.
    result: Any

    @property
    def finished(self) -> bool:
        """No step of it will run any more."""
        return self.finished_at is not None

    def refresh(self) -> Run:
        """The workflow as it stands now."""
        return get(self.id)


def get(workflow_id: int | Run) -> Run:
    """The workflow ``workflow_id``: its status, its steps' statuses and results, and its
    result. Three queries, whatever its size."""
    using = router.db_for_read(Job)
    workflow = _found(workflow_id, using)
    pk = workflow.pk
    rows = (
        WorkflowStep.objects.using(using)
        .filter(workflow_id=pk)
        .select_related("job")
        .order_by("position")
    )
    position_of: dict[int, int] = {}
    found = []
    for row in rows:
        position_of[row.job_id] = row.position
        found.append(row)
    parents: dict[int, list[int]] = defaultdict(list)
    for parent, child in (
        WorkflowEdge.objects.using(using)
        .filter(workflow_id=pk)
        .order_by("child_id", "position")
        .values_list("parent_id", "child_id")
    ):
        parents[child].append(position_of.get(parent, -1))
    states = tuple(
        _state(row.job, row.position, tuple(parents[row.job_id]), row.always) for row in found
    )
    return _run(workflow, states)


def run_of(workflow: Workflow, jobs: Sequence[Job], nodes: Sequence[Node]) -> Run:
    """The run of a workflow just written, from what was written (no query): each step's
    job and its plan's node (the positions of its parents, whether it runs always). Its
    jobs have not run: no result, error or progress yet. Its steps are made when first
    read."""

    def states() -> tuple[StepState, ...]:
        return tuple(
            StepState(
                position=position,
                job_id=job.id,
                result_id=result_id(job.id, job.token),
                task_path=job.task_path,
                status=str(job.status),
                result=None,
                error=None,
                progress=None,
                waits_for=tuple(node.parents),
                always=node.step.run_always,
            )
            for position, (job, node) in enumerate(zip(jobs, nodes, strict=True))
        )

    return _run(workflow, Steps(states))


def _state(job: Job, position: int, waits_for: tuple[int, ...], always: bool) -> StepState:
    status = str(job.status)
    errors = job.errors or []
    last_class = errors[-1].get("exception_class_path") if errors else None
    if status == JobStatus.CANCELLED and last_class == steps.UPSTREAM_FAILED:
        status = UPSTREAM_FAILED
    error = None
    if errors:
        lines = str(errors[-1].get("traceback", "")).strip().splitlines()
        error = lines[-1] if lines else errors[-1].get("exception_class_path")
    return StepState(
        position=position,
        job_id=job.pk,
        result_id=result_id(job.pk, job.token),
        task_path=job.task_path,
        status=status,
        result=job.return_value if status == JobStatus.SUCCEEDED else None,
        error=error,
        progress=Progress.from_stored(job.progress),
        waits_for=waits_for,
        always=always,
    )


def _run(workflow: Workflow, states: Sequence[StepState]) -> Run:
    result = None
    if workflow.status == WorkflowStatus.SUCCEEDED:
        values = [states[p].result for p in workflow.result_positions if p < len(states)]
        result = values if workflow.result_is_list else (values[0] if values else None)
    return Run(
        id=workflow.pk,
        name=workflow.name,
        status=str(workflow.status),
        created_at=workflow.created_at,
        finished_at=workflow.finished_at,
        steps=states,
        result=result,
    )


def _step_job_ids(using: str, pk: int) -> list[int]:
    """The jobs of the workflow ``pk``'s steps. Read first, then changed by primary key: an
    UPDATE whose rows come from a subquery scans the whole job table on MariaDB."""
    return list(
        WorkflowStep.objects.using(using).filter(workflow_id=pk).values_list("job_id", flat=True)
    )


def _found(workflow_id: int | Run, using: str, lock: bool = False) -> Workflow:
    """The workflow ``workflow_id`` (locked with ``lock``), or WorkflowDoesNotExist."""
    pk = workflow_id.id if isinstance(workflow_id, Run) else workflow_id
    if isinstance(pk, bool) or not isinstance(pk, int):
        raise TypeError(f"A workflow is named by its id (an int) or its run, not {pk!r}.")
    rows = Workflow.objects.using(using)
    workflow = (rows.select_for_update() if lock else rows).filter(pk=pk).first()
    if workflow is None:
        raise WorkflowDoesNotExist(f"No workflow {pk!r}.")
    return workflow


def lock_callbacks(using: str, workflow: Workflow) -> list[tuple[int, bool]]:
    """A batch's callback steps (job id, whether it always runs), their rows locked in
    job order. ``add_to_batch()`` and ``retry()`` take them before the workflow's row, as
    a completion does (it counts them down, then the workflow): one order for all three,
    so that none waits on another in a circle."""
    return list(
        WorkflowStep.objects.using(using)
        .select_for_update()
        .filter(workflow_id=workflow.pk, position__in=workflow.batch_callbacks)
        .order_by("job_id")
        .values_list("job_id", "always")
    )


def cancel(workflow_id: int | Run) -> str:
    """Cancel a workflow: its steps that have not started never run (clean-up steps
    included), its running ones are asked to stop (``context.cancelled()``). Returns the
    workflow's status: "cancelled", or how it had already ended.

    Its rows are changed in the order a completion changes them (running jobs, the jobs
    waiting for them, then the workflow), so that a cancel and a completion at once do not
    wait on each other in a circle."""
    using = router.db_for_write(Job)
    now = timezone.now()
    with transaction.atomic(using=using):
        workflow = _found(workflow_id, using)
        pk = workflow.pk
        if workflow.finished_at is not None or workflow.status == WorkflowStatus.CANCELLED:
            return str(workflow.status)
        cancelled = 0
        for ids in steps.chunks(_step_job_ids(using, pk)):
            jobs = Job.objects.using(using).filter(id__in=ids)
            # Running steps first: a completion locks a parent before its children.
            jobs.filter(status=JobStatus.RUNNING, cancel_requested_at=None).update(
                cancel_requested_at=now
            )
            cancelled += jobs.filter(status__in=[JobStatus.WAITING, JobStatus.QUEUED]).update(
                status=JobStatus.CANCELLED, finished_at=now
            )
        # Not over a workflow whose last step has just finished it.
        Workflow.objects.using(using).filter(pk=pk, finished_at=None).update(
            status=WorkflowStatus.CANCELLED
        )
        if cancelled:
            steps.count_down(using, Counter({pk: cancelled}), set(), now)
        stored = Workflow.objects.using(using).filter(pk=pk).values_list("status", flat=True)
    return str(stored.first())


def retry(workflow_id: int | Run) -> int:
    """Run a failed or cancelled workflow's unsuccessful steps again, and every step below
    them; the steps that succeeded (and are not below one that did not) keep their results.
    Returns how many steps will run again."""
    try:
        return _retry(workflow_id)
    except IntegrityError:
        raise WorkflowNotRetryable(
            f"Workflow {getattr(workflow_id, 'id', workflow_id)} was not retried: a step's "
            "unique key is held by another job that can still run. Nothing was changed."
        ) from None


def _retry(workflow_id: int | Run) -> int:
    using = router.db_for_write(Job)
    now = timezone.now()
    with transaction.atomic(using=using):
        workflow = _found(workflow_id, using)
        if workflow.is_batch:
            # Its callbacks' rows before the workflow's, as add_to_batch() takes them.
            lock_callbacks(using, workflow)
        # No step of a finished workflow runs: no completion takes its rows meanwhile.
        workflow = _found(workflow_id, using, lock=True)
        pk = workflow.pk
        if workflow.finished_at is None or workflow.status == WorkflowStatus.SUCCEEDED:
            raise WorkflowNotRetryable(
                f"Workflow {pk} is {workflow.status}"
                + (" and still has steps to run" if workflow.finished_at is None else "")
                + ": only a finished workflow that failed or was cancelled can be retried."
            )
        statuses: dict[int, str] = {}
        for ids in steps.chunks(_step_job_ids(using, pk)):
            statuses.update(Job.objects.using(using).filter(id__in=ids).values_list("id", "status"))
        children: dict[int, list[int]] = defaultdict(list)
        parents: dict[int, list[int]] = defaultdict(list)
        for parent, child in (
            WorkflowEdge.objects.using(using)
            .filter(workflow_id=pk)
            .values_list("parent_id", "child_id")
        ):
            children[parent].append(child)
            parents[child].append(parent)
        again = {job for job, status in statuses.items() if status != JobStatus.SUCCEEDED}
        below = list(again)
        while below:
            job = below.pop()
            for child in children[job]:
                if child not in again:
                    again.add(child)
                    below.append(child)
        if not again:
            raise WorkflowNotRetryable(f"Workflow {pk} has no step that did not succeed.")
        # Each step to run again waits for its parents that run again too.
        by_count: dict[int, list[int]] = defaultdict(list)
        for job in again:
            by_count[sum(1 for p in parents[job] if p in again)].append(job)
        fresh = {
            "finished_at": None,
            "cancel_requested_at": None,
            "return_value": None,
            "progress": None,
            "max_attempts": Greatest(F("max_attempts"), F("attempts") + 1),
        }
        queued = []
        for count, jobs in by_count.items():
            for ids in steps.chunks(jobs):
                WorkflowStep.objects.using(using).filter(job_id__in=ids).update(waiting_on=count)
                if count:
                    Job.objects.using(using).filter(id__in=ids).update(
                        status=JobStatus.WAITING, **fresh
                    )
                    continue
                queued += update_returning(
                    "workflow-retry",
                    Job.objects.using(using).filter(id__in=ids),
                    {"status": JobStatus.QUEUED, "run_at": now, **fresh},
                    ["queue", "run_at"],
                )
        Workflow.objects.using(using).filter(pk=pk).update(
            status=WorkflowStatus.RUNNING, finished_at=None, steps_left=len(again)
        )
        notify_on_commit([(row["queue"], row["run_at"]) for row in queued], using=using)
    return len(again)
