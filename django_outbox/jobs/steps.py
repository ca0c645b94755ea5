"""Workflow steps in the engine: what a step's end does to the steps that wait for it.

``settle()`` runs in the transaction that stores the steps' outcomes, whatever their number,
in a fixed number of statements (for each 5,000 steps it touches):

1. a step that failed or was cancelled takes down the steps below it that would have used
   its result (one read of them, one UPDATE: "not run, upstream failed"), not those
   declared to run always;
2. every step that ended takes one off the count of each child still waiting for it (one
   read of the children, one UPDATE), and the children whose count reaches 0 are queued
   (one read, one UPDATE). The count is taken off under the child's row lock, so of two
   batches ending a chord's last members at once on two machines, exactly one sees it
   reach 0; no sibling is read;
3. each workflow counts its steps left, and is finished (succeeded, or failed if a step
   failed) when none is (one UPDATE).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, router
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.db.models.functions import Greatest

from django_outbox.db import dialect, named
from django_outbox.exceptions import UpstreamFailed
from django_outbox.jobs.returning import update_returning
from django_outbox.models import (
    Job,
    JobStatus,
    Receives,
    Workflow,
    WorkflowEdge,
    WorkflowStatus,
    WorkflowStep,
)
from django_outbox.wake.notify import notify_on_commit

#: The error class a step that never ran because a step above it failed is left with.
UPSTREAM_FAILED = f"{UpstreamFailed.__module__}.{UpstreamFailed.__qualname__}"


@dataclass(frozen=True, slots=True)
class Ended:
    """A step job that has just ended: its id, its workflow, and whether it succeeded."""

    job_id: int
    workflow_id: int
    succeeded: bool


def settle(ended: Sequence[Ended], now: datetime) -> int:
    """What the end of ``ended`` does to their workflows (see the module's docstring), in
    the caller's transaction; returns how many steps were queued."""
    if not ended:
        return 0
    using = router.db_for_write(Job)
    bad = [e.job_id for e in ended if not e.succeeded]
    not_run = _take_down(using, bad, now) if bad else []
    finished = [e.job_id for e in ended] + [e.job_id for e in not_run]
    released = _release_children(using, finished, now)
    left = Counter(e.workflow_id for e in [*ended, *not_run])
    failed = {e.workflow_id for e in ended if not e.succeeded}
    count_down(using, left, failed, now)
    return released


def _take_down(using: str, bad: list[int], now: datetime) -> list[Ended]:
    """Mark the waiting steps below ``bad`` that are not declared ``always``, through
    steps that are not either, as not run; returns them."""
    connection = connections[using]
    quote = connection.ops.quote_name
    edge = quote(WorkflowEdge._meta.db_table)
    step = quote(WorkflowStep._meta.db_table)
    below: set[int] = set()
    for some in chunks(bad):
        placeholders = ", ".join(["%s"] * len(some))
        # Standard SQL all three databases speak (SQLite 3.8.3, MariaDB 10.2, MySQL 8).
        sql = (
            f"WITH RECURSIVE below(id) AS ("
            f"SELECT e.child_id FROM {edge} e JOIN {step} s ON s.job_id = e.child_id "
            f"WHERE e.parent_id IN ({placeholders}) AND s.always = %s "
            f"UNION SELECT e.child_id FROM {edge} e JOIN below b ON e.parent_id = b.id "
            f"JOIN {step} s ON s.job_id = e.child_id WHERE s.always = %s"
            f") SELECT id FROM below"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                named("workflow-below", dialect(using).deep_recursion(sql)), [*some, False, False]
            )
            below.update(row[0] for row in cursor.fetchall())
    if not below:
        return []
    error = {
        "exception_class_path": UPSTREAM_FAILED,
        "traceback": f"Not run: a step it waits for (job #{bad[0]}, or one above it) "
        "failed or was cancelled.\n",
    }
    not_run = []
    for some in chunks(sorted(below)):
        rows = update_returning(
            "workflow-not-run",
            Job.objects.using(using).filter(id__in=some, status=JobStatus.WAITING),
            {"status": JobStatus.CANCELLED, "finished_at": now, "errors": [error]},
            ["id", "workflow_id"],
        )
        not_run += [Ended(row["id"], row["workflow_id"], False) for row in rows]
    return not_run


def _release_children(using: str, parents: list[int], now: datetime) -> int:
    """Take each ended parent off its children's counts; queue the children at 0.

    The children are read first and then written by primary key: an UPDATE whose rows
    come from a subquery scans the whole step table on MariaDB."""
    counts: Counter[int] = Counter()
    for some in chunks(parents):
        edges = WorkflowEdge.objects.using(using).filter(parent_id__in=some)
        counts.update(edges.values_list("child_id", flat=True))
    released = 0
    for children in chunks(list(counts)):
        by_count: dict[int, list[int]] = {}
        for child in children:
            by_count.setdefault(counts[child], []).append(child)
        taken = Case(
            *(When(job_id__in=ids, then=Value(n)) for n, ids in by_count.items() if n != 1),
            default=Value(1),
            output_field=IntegerField(),
        )
        steps = WorkflowStep.objects.using(using).filter(job_id__in=children)
        steps.update(waiting_on=F("waiting_on") - taken)
        ready = list(steps.filter(waiting_on__lte=0).values_list("job_id", flat=True))
        rows = update_returning(
            "workflow-release",
            Job.objects.using(using).filter(status=JobStatus.WAITING, id__in=ready),
            {"status": JobStatus.QUEUED, "run_at": Greatest(F("run_at"), Value(now))},
            ["queue", "run_at"],
        )
        notify_on_commit([(row["queue"], row["run_at"]) for row in rows], using=using)
        released += len(rows)
    return released


#: Ids per statement where a statement lists them (SQLite takes 32,766 parameters).
CHUNK = 5_000


def chunks(ids: list[int]) -> list[list[int]]:
    """``ids`` in lists of at most CHUNK."""
    return [ids[start : start + CHUNK] for start in range(0, len(ids), CHUNK)]


def count_down(using: str, left: Counter[int], failed: set[int], now: datetime) -> None:
    """Take the steps that ended off each workflow's count; finish the workflows at 0."""
    taken = Case(
        *(When(id=workflow, then=Value(n)) for workflow, n in left.items()),
        default=Value(0),
        output_field=IntegerField(),
    )
    running = Q(status=WorkflowStatus.RUNNING)
    # status and finished_at before steps_left: MariaDB and MySQL assign left to right, and
    # an assignment there reads what the ones before it wrote.
    Workflow.objects.using(using).filter(id__in=list(left)).update(
        status=Case(
            When(running & Q(id__in=list(failed)), then=Value(WorkflowStatus.FAILED)),
            When(running & Q(steps_left__lte=taken), then=Value(WorkflowStatus.SUCCEEDED)),
            default=F("status"),
        ),
        finished_at=Case(When(steps_left__lte=taken, then=Value(now)), default=F("finished_at")),
        steps_left=F("steps_left") - taken,
    )


def steps_ended(rows: Iterable[dict[str, Any]], succeeded: bool) -> list[Ended]:
    """``Ended`` for the step jobs among ``rows`` (dicts with id and workflow_id)."""
    return [
        Ended(row["id"], row["workflow_id"], succeeded)
        for row in rows
        if row["workflow_id"] is not None
    ]


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a step gets from the steps it waits for."""

    receives: Receives
    #: Their results, in the order the step named them (None for one that did not succeed).
    results: list[Any]

    def arguments(self, args: list[Any]) -> list[Any]:
        """The step's positional arguments, after what it receives from upstream."""
        if self.receives == Receives.ONE:
            return [self.results[0] if self.results else None, *args]
        if self.receives == Receives.LIST:
            return [self.results, *args]
        return args


def inputs(job_id: int, receives: int) -> Inputs:
    """The results of the steps the step ``job_id`` waits for, and what it takes of them
    (``receives``): one query, whatever their number (the parents are joined, not listed)."""
    parents = (
        WorkflowEdge.objects.using(router.db_for_read(Job))
        .filter(child_id=job_id)
        .order_by("position")
        .values_list("parent__status", "parent__return_value")
    )
    results = [value if status == JobStatus.SUCCEEDED else None for status, value in parents]
    return Inputs(Receives(receives), results)
