"""The hand-off: the worker that ends a key's job runs the key's next job itself.

A key with a limit of 1 has one job queued or running at a time. Without a hand-off, the
end of its job queues the next, and a claim (this worker's or another's) takes it: one
more write of the row and one more claim per job, and the workers' claims come back short,
so claiming, running and completing follow one another instead of overlapping. With it,
the completion's transaction writes the next job straight to running under this worker,
leased as a claim leases it (``claim.set_claimed``), and the worker runs it.

Only where a claim by this worker could have taken the job: its queue is one the worker
serves, is not paused and has no concurrency or rate limit (those are counted at the
claim), it is due, it was enqueued through the worker's TASKS alias, and the worker has
room. The rest is queued, and signalled, as before. A handed-off job goes before queued
jobs of higher priority: priority orders the queue, and a handed-off job never joins it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections

from django_outbox.db import dialect, named
from django_outbox.db.rowvalues import among
from django_outbox.jobs.claim import (
    RETURNED_FIELDS,
    claimed_jobs,
    claimed_params,
    set_claimed,
    set_claimed_when,
)
from django_outbox.jobs.returning import column
from django_outbox.jobs.types import ClaimedJob
from django_outbox.models import Job, JobStatus


@dataclass(slots=True)
class Handoff:
    """A worker ready to take the next jobs of the keys its completion frees."""

    worker_id: str
    #: Queues whose jobs it may take: served, not paused, without a limit.
    queues: frozenset[str]
    backend: str
    #: Most jobs to take.
    room: int
    lease_seconds: float
    #: The jobs taken, once the completion's transaction has committed (``decode()``).
    jobs: list[ClaimedJob] = field(default_factory=list)
    #: Jobs the admission queued rather than handed off (others may claim them).
    queued: int = 0
    #: The rows taken, and when, as the database returned them: decoded after the commit,
    #: not while the transaction holds its locks (SQLite's one write lock, above all).
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    taken_at: datetime | None = None
    #: The room it started with (a try that was rolled back gives it back).
    offered: int = field(init=False)

    def __post_init__(self) -> None:
        self.offered = self.room

    def start(self) -> None:
        """Forget what an earlier try took (its transaction was rolled back)."""
        self.jobs, self.rows, self.queued, self.room = [], [], 0, self.offered

    def decode(self, using: str) -> None:
        """The jobs of the rows taken, once their transaction has committed."""
        if self.rows and self.taken_at is not None:
            self.jobs = claimed_jobs(connections[using], self.rows, self.worker_id, self.taken_at)


def assignments(using: str, handoff: Handoff, now: datetime) -> tuple[str, list[Any]]:
    """The SET clause of an admission that hands off as it queues (where the dialect has
    one: ``Dialect.admit_held_taking``): running and leased to the worker for the jobs it
    may take, queued for the others; with its parameters. The caller takes no more keys
    than the worker has room for (the statement admits one job per key)."""
    connection = connections[using]
    queues = sorted(handoff.queues)
    condition = f"(queue IN ({', '.join(['%s'] * len(queues))}) AND run_at <= %s AND backend = %s)"
    handoff.taken_at = now
    return set_claimed_when(
        using,
        condition,
        [*queues, connection.ops.adapt_datetimefield_value(now), handoff.backend],
        claimed_params(connection, handoff.worker_id, handoff.lease_seconds, now),
        f"'{JobStatus.QUEUED.value}'",
    )


def take(
    using: str, handoff: Handoff, admitted: list[tuple[int, str, datetime]], now: datetime
) -> set[int]:
    """Of the jobs the admission just queued (id, queue, due time), lease to the worker the
    oldest it may take, in the caller's transaction; returns their ids."""
    wanted = sorted(
        job_id for job_id, queue, run_at in admitted if queue in handoff.queues and run_at <= now
    )[: handoff.room]
    if not wanted:
        return set()
    connection = connections[using]
    table = connection.ops.quote_name(Job._meta.db_table)
    ids, id_params = among(using, "id", wanted)
    where = f"WHERE {ids} AND status = '{JobStatus.QUEUED.value}' AND backend = %s"
    claimed = claimed_params(connection, handoff.worker_id, handoff.lease_seconds, now)
    returned = ", ".join(connection.ops.quote_name(column(Job, name)) for name in RETURNED_FIELDS)
    with connection.cursor() as cursor:
        if dialect(using).update_returning:
            cursor.execute(
                named(
                    "key-handoff",
                    f"UPDATE {table} SET {set_claimed(using)} {where} RETURNING {returned}",
                ),
                [*claimed, *id_params, handoff.backend],
            )
            rows = list(cursor.fetchall())
        else:  # read, then write: the admission's UPDATE holds the rows' locks already
            cursor.execute(
                named("key-handoff-read", f"SELECT {returned} FROM {table} {where}"),
                [*id_params, handoff.backend],
            )
            rows = list(cursor.fetchall())
            if rows:
                ids, id_params = among(using, "id", [row[0] for row in rows])
                cursor.execute(
                    named("key-handoff", f"UPDATE {table} SET {set_claimed(using)} WHERE {ids}"),
                    [*claimed, *id_params],
                )
    handoff.rows += rows
    handoff.taken_at = now
    handoff.room -= len(rows)
    return {row[0] for row in rows}  # RETURNED_FIELDS begin with the id
