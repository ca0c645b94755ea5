"""Writing a built workflow, in the caller's transaction, in a fixed number of statements
whatever its number of steps: the workflow row, its step jobs (through the one job-insert
path, jobs/enqueue.py), their step rows and their edges; one INSERT per table for each
1,000 rows, written as rows (``db.inserts.insert_alike``), not model instances."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from django.db import IntegrityError, router, transaction
from django.utils import timezone

from django_outbox.compat import Task
from django_outbox.db.inserts import Batches, insert_alike, rows_per_statement
from django_outbox.db.routing import database_of, jobs_of
from django_outbox.exceptions import OutboxError
from django_outbox.jobs import dedup
from django_outbox.jobs.enqueue import CHUNK_SIZE, build_jobs, insert_step_batches
from django_outbox.lib.collector import collector_paused
from django_outbox.models import Job, JobStatus, Workflow, WorkflowEdge, WorkflowStep
from django_outbox.task import OutboxTask
from django_outbox.workflows.plan import Plan, PlannedStep
from django_outbox.workflows.runs import Run, run_of


def write(plan: Plan, result_positions: list[int], result_is_list: bool, name: str) -> Run:
    """Write ``plan`` in the database of its tasks' TASKS alias, in the current transaction.
    A plan with a batch is written as one: the steps that wait for its members are the ones
    ``add_to_batch()`` counts up."""
    batch_callbacks = plan.batch_waiters()
    aliases = {node.step.task.backend for node in plan.nodes}
    databases = {database_of(alias) for alias in aliases}
    if len(databases) > 1:
        raise ValueError(
            f"A workflow's steps must keep their jobs in one database; these tasks use the "
            f"TASKS aliases {', '.join(sorted(aliases))}, which keep them in different ones."
        )
    keys = unique_keys([node.step for node in plan.nodes])
    with jobs_of(plan.nodes[0].step.task.backend), collector_paused():
        try:
            return _write(plan, result_positions, result_is_list, name, batch_callbacks, keys)
        except IntegrityError:
            if not any(keys):
                raise
            raise key_held(keys, "The workflow was not enqueued") from None


class UniqueKeyHeld(OutboxError):
    """A step's unique key is held by another job that can still run (waiting, queued or
    running): the workflow is not enqueued."""


def key_held(keys: list[str | None], what: str) -> UniqueKeyHeld:
    """The error for steps whose unique keys met an active job's: it names the holders."""
    held_by = dedup.active_with_keys(router.db_for_write(Job), [k for k in keys if k])
    holders = ", ".join(
        f"{key!r} by job #{pk} ({status})"
        for key, pk, status in held_by.values_list("dedup_key", "pk", "status")
    )
    return UniqueKeyHeld(
        f"{what}: a step's unique key is held by a job that can still run"
        + (f" ({holders})" if holders else "")
        + ". Nothing of it was written."
    )


def unique_keys(steps: Sequence[PlannedStep]) -> list[str | None]:
    """Each step's unique key (None for a task without one); two steps with the same key
    are an error."""
    keys: list[str | None] = []
    for step in steps:
        task = step.task
        key = task.unique_key_for(step.args, step.kwargs) if isinstance(task, OutboxTask) else None
        if key is not None and key in keys:
            raise ValueError(
                f"Two steps have the unique key {key!r} "
                f"(steps {keys.index(key)} and {len(keys)}): only one job may hold it."
            )
        keys.append(key)
    return keys


def _write(
    plan: Plan,
    result_positions: list[int],
    result_is_list: bool,
    name: str,
    batch_callbacks: list[int] | None,
    keys: list[str | None],
) -> Run:
    using = router.db_for_write(Job)
    now = timezone.now()
    total = len(plan.nodes)
    with transaction.atomic(using=using):
        workflow = Workflow.objects.using(using).create(
            name=name[:200],
            created_at=now,
            steps_total=total,
            steps_left=total,
            result_positions=result_positions,
            result_is_list=result_is_list,
            is_batch=batch_callbacks is not None,
            batch_callbacks=batch_callbacks or [],
        )
        nodes = plan.nodes
        jobs: list[Job] = []

        def step_batches() -> Iterator[list[tuple[Task, Job]]]:
            # Made a batch at a time, each while the server writes the one before.
            for start in range(0, total, CHUNK_SIZE):
                batch = nodes[start : start + CHUNK_SIZE]
                made = build_jobs([(n.step.task, n.step.args, n.step.kwargs) for n in batch], now)
                for position, (node, job) in enumerate(zip(batch, made, strict=True), start):
                    job.workflow_id = workflow.pk
                    job.dedup_key = keys[position]
                    if node.parents:
                        job.status, job.receives = JobStatus.WAITING, node.receives
                jobs.extend(made)
                yield [(node.step.task, job) for node, job in zip(batch, made, strict=True)]

        stepped = 0  # how many steps have their rows sent

        def write_steps(batches: Batches, written: list[Job]) -> None:
            # The jobs come in order: the first of these is the next step without its row.
            nonlocal stepped
            first, stepped = stepped, stepped + len(written)
            rows = [
                (job.id, position, len(nodes[position].parents), nodes[position].step.run_always)
                for position, job in enumerate(written, first)
            ]
            per = rows_per_statement(using, 5, CHUNK_SIZE)
            for start in range(0, len(rows), per):
                batches.insert_alike(
                    "workflow-steps",
                    WorkflowStep,
                    {"workflow": workflow.pk},
                    ("job", "position", "waiting_on", "always"),
                    rows[start : start + per],
                )

        insert_step_batches(nodes[0].step.task, total, step_batches(), False, write_steps)
        ids = [job.id for job in jobs]
        edges = [
            (ids[parent], ids[position], i)
            for position, node in enumerate(plan.nodes)
            for i, parent in enumerate(node.parents)
        ]
        insert_alike(
            "workflow-edges",
            WorkflowEdge,
            {"workflow": workflow.pk},
            ("parent", "child", "position"),
            edges,
            CHUNK_SIZE,
            returning=False,
        )
    return run_of(workflow, jobs, nodes)
