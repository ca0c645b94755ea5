"""Batched completion: one UPDATE per outcome per batch, not one per job.

Each statement only touches jobs still running under this worker's id: a job whose lease
expired and was taken back is not overwritten by a late result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router, transaction
from django.db.models.expressions import RawSQL
from django.utils import timezone

from django_outbox.db import dialect, named
from django_outbox.db.rowvalues import NO_VALUE, among, array_literal, per_row, postgres_array
from django_outbox.jobs import backoff, keys, sidewrites, steps
from django_outbox.jobs.handoff import Handoff
from django_outbox.jobs.returning import column
from django_outbox.jobs.types import Outcome
from django_outbox.models import Job, JobStatus

logger = logging.getLogger("django_outbox.worker")


def next_run_at(outcome: Outcome) -> datetime:
    if outcome.retry_at is not None:
        return outcome.retry_at
    job = outcome.job
    seconds = backoff.delay(job.attempts, job.backoff_base, job.backoff_cap)
    return outcome.finished_at + timedelta(seconds=seconds)


def complete(worker_id: str, outcomes: Iterable[Outcome], handoff: Handoff | None = None) -> int:
    """Store a batch of outcomes, and the rows their runs deferred (see sidewrites.py) in
    the same transaction; returns how many outcomes were stored. With a ``handoff``, the
    worker takes the next jobs of the keys the batch frees (handoff.py): they are in
    ``handoff.jobs`` once this returns.

    Fewer than given means some jobs had lost their lease (the worker was cut off from
    the database for longer than a lease): another worker took them back, and their
    late results are dropped rather than overwrite what happened since. Their deferred
    rows are written all the same: they record what the run did.
    """
    outcomes = list(outcomes)
    if handoff is not None:  # a retried call starts afresh
        handoff.start()
    ending_steps = [o for o in outcomes if o.job.workflow_id is not None and o.ends_job]
    ending_keyed = [o for o in outcomes if o.job.limit_key is not None and o.ends_job]
    if not ending_steps and not ending_keyed and not any(o.writes for o in outcomes):
        return _complete(worker_id, outcomes)
    using = router.db_for_write(Job)
    with transaction.atomic(using=using):
        then = sidewrites.write(outcomes)
        stored = _complete(worker_id, outcomes)
        if ending_steps:
            _settle_steps(ending_steps, all_stored=stored == len(outcomes))
        if ending_keyed:
            # Counted from what is stored: a result dropped (its lease ran out) gives no turn.
            keys.ended(
                using,
                [(o.job.id, o.job.limit_key) for o in ending_keyed],  # type: ignore[misc]
                failed=[o.job.id for o in ending_keyed if o.status == JobStatus.FAILED],
                now=timezone.now(),
                handoff=handoff,
            )
    if handoff is not None:
        handoff.decode(using)
    for after in then:
        try:
            after()
        except Exception:
            # The rows are stored; what follows them (a signal's receiver, say) failing
            # must not stop the worker nor undo them.
            logger.exception("after storing %d outcomes: %s failed", len(outcomes), after)
    return stored


def _settle_steps(outcomes: list[Outcome], all_stored: bool) -> None:
    """Workflow steps ended in this batch: release or take down what waits for them
    (jobs/steps.py). When some results of the batch were not stored (their leases ran out),
    only the steps whose rows now hold this batch's ending count."""
    if not all_stored:
        using = router.db_for_write(Job)
        rows = Job.objects.using(using).filter(id__in=[o.job.id for o in outcomes])
        stored = set(rows.values_list("id", "status", "finished_at"))
        outcomes = [o for o in outcomes if (o.job.id, o.status, o.finished_at) in stored]
    ended = [steps.Ended(o.job.id, o.job.workflow_id, o.succeeded) for o in outcomes]  # type: ignore[arg-type]
    steps.settle(ended, timezone.now())


def _complete(worker_id: str, outcomes: list[Outcome]) -> int:
    by_status: dict[JobStatus, list[Outcome]] = {status: [] for status in JobStatus}
    held: list[Outcome] = []
    for outcome in outcomes:
        (held if outcome.held else by_status[outcome.status]).append(outcome)
    succeeded = by_status[JobStatus.SUCCEEDED]
    retried = by_status[JobStatus.QUEUED]
    stored = 0
    if held:
        stored += _hold_back(worker_id, held)
    if succeeded:
        with_values = [o for o in succeeded if o.return_value is not None]
        updates: dict[str, Any] = {
            "status": JobStatus.SUCCEEDED,
            "finished_at": _per_job(succeeded, lambda o: o.finished_at, "datetime"),
            "lease_until": None,
            "worker_id": None,
        }
        if with_values:
            updates["return_value"] = _per_job(with_values, lambda o: o.return_value, "json")
        stored += _update(worker_id, succeeded, "complete-succeeded", updates)
    for outcome in retried:
        outcome.retry_at = next_run_at(outcome)  # fixed now: the worker reads it after
    if retried:
        stored += _update(
            worker_id,
            retried,
            "complete-retried",
            {
                "status": JobStatus.QUEUED,
                "run_at": _per_job(retried, next_run_at, "datetime"),
                "errors": _per_job(retried, lambda o: o.errors, "json"),
                "lease_until": None,
                "worker_id": None,
            },
        )
    for status in (JobStatus.FAILED, JobStatus.CANCELLED):
        ended = by_status[status]
        if not ended:
            continue
        stored += _update(
            worker_id,
            ended,
            f"complete-{status.value.lower()}",
            {
                "status": status,
                "finished_at": _per_job(ended, lambda o: o.finished_at, "datetime"),
                "errors": _per_job(ended, lambda o: o.errors, "json"),
                "lease_until": None,
                "worker_id": None,
            },
        )
    return stored


def _hold_back(worker_id: str, held: list[Outcome]) -> int:
    """Queue held-back runs again for their time, as if never claimed: the attempt and the
    worker id the claim added are taken off again."""
    connection = connections[router.db_for_write(Job)]
    quote = connection.ops.quote_name
    attempts = quote(column(Job, "attempts"))
    worker_ids = quote(column(Job, "worker_ids"))
    started_at = quote(column(Job, "started_at"))
    values: dict[str, Any] = {
        # Before attempts changes: MariaDB and MySQL assign left to right, and an
        # assignment there reads what the ones before it wrote.
        "started_at": RawSQL(f"CASE WHEN {attempts} = 1 THEN NULL ELSE {started_at} END", []),
        "status": JobStatus.QUEUED,
        "run_at": _per_job(held, lambda o: o.held_until, "datetime"),
        "lease_until": None,
        "worker_id": None,
        "attempts": RawSQL(f"{attempts} - 1", []),
        "worker_ids": RawSQL(dialect(connection.alias).json_remove_last(worker_ids), []),
    }
    rewritten = [o for o in held if o.new_kwargs is not None]
    if rewritten:
        values["kwargs"] = per_row(
            router.db_for_write(Job),
            [(o.job.id, o.new_kwargs) for o in rewritten],
            "json",
            default=column(Job, "kwargs"),
        )
    return _update(worker_id, held, "hold-back", values)


@dataclass(frozen=True, slots=True)
class PerJob:
    """Each listed job's own value of a column (``kind``: datetime, json, int or text);
    the outcomes' jobs not listed get NULL."""

    pairs: list[tuple[int, Any]]
    kind: str


def _update(worker_id: str, outcomes: list[Outcome], name: str, values: dict[str, Any]) -> int:
    """One UPDATE of the outcomes' jobs (the statement ``name``), written out rather than
    built by the ORM (see claim.py): each value is a constant, None, SQL (RawSQL), or each
    job's own (PerJob).

    Only jobs still running under ``worker_id`` at the run's attempt change: a late result
    of an earlier run of a job that this same worker claimed again must not land on the
    new run, nor a result on a job another worker took back."""
    connection = connections[router.db_for_write(Job)]
    if dialect(connection.alias).array_parameters:
        return _update_joined(connection, worker_id, outcomes, name, values)
    quote = connection.ops.quote_name
    assignments, params = _assignments(
        connection,
        values,
        lambda values: per_row(connection.alias, values.pairs, values.kind),
    )
    ids, ids_params = among(connection.alias, "id", [o.job.id for o in outcomes])
    attempts = per_row(connection.alias, [(o.job.id, o.job.attempts) for o in outcomes], "int")
    sql = (
        f"UPDATE {quote(Job._meta.db_table)} SET {', '.join(assignments)} "
        f"WHERE status = '{JobStatus.RUNNING.value}' AND worker_id = %s "
        f"AND {ids} AND attempts = {attempts.sql}"
    )
    with connection.cursor() as cursor:
        cursor.execute(named(name, sql), [*params, worker_id, *ids_params, *attempts.params])
        count: int = cursor.rowcount
    return count


def _update_joined(
    connection: Any, worker_id: str, outcomes: list[Outcome], name: str, values: dict[str, Any]
) -> int:
    """With array parameters: the per-job values as a table (one array per column, named
    ``v``) joined to the jobs by id, which costs the server one hash join; finding each
    row's value in the arrays by position would cost it a scan of the keys per row and
    column."""
    quote = connection.ops.quote_name
    table = quote(Job._meta.db_table)
    ids = [o.job.id for o in outcomes]
    arrays: list[Any] = [array_literal(ids), array_literal([o.job.attempts for o in outcomes])]
    types, names = ["bigint", "integer"], ["_id", "_attempts"]

    def column_of_values(values: PerJob) -> RawSQL:
        by_id = dict(values.pairs)
        array, element = postgres_array(
            connection.alias, [by_id.get(pk, NO_VALUE) for pk in ids], values.kind
        )
        arrays.append(array)
        types.append(element)
        names.append(f"_v{len(names)}")
        return RawSQL(f"v.{names[-1]}", [])

    assignments, params = _assignments(connection, values, column_of_values)
    # Status and worker are compared with columns of v, not constants, and the rows are
    # found by their ids (update_from_arrays): the plan is the same whatever the
    # statistics say, and reads no partial index's dead entries.
    sql = dialect(connection.alias).update_from_arrays(
        table,
        ", ".join(assignments),
        list(zip(names, types, strict=True)),
        f"{table}.id = v._id AND {table}.attempts = v._attempts "
        f"AND {table}.status = v._status AND {table}.worker_id = v._worker",
        constants=(("_status", "text"), ("_worker", "text")),
        key=("id", "bigint"),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            named(name, sql),
            [*params, JobStatus.RUNNING.value, worker_id, *arrays, arrays[0]],
        )
        count: int = cursor.rowcount
    return count


def _assignments(
    connection: Any, values: dict[str, Any], per_job: Callable[[PerJob], RawSQL]
) -> tuple[list[str], list[Any]]:
    """The SET list of ``values`` and its parameters; ``per_job`` writes a PerJob as SQL."""
    quote = connection.ops.quote_name
    assignments: list[str] = []
    params: list[Any] = []
    for name, value in values.items():
        if isinstance(value, PerJob):
            value = per_job(value)
        name_sql = quote(column(Job, name))
        if isinstance(value, RawSQL):
            assignments.append(f"{name_sql} = {value.sql}")
            params += value.params
        elif value is None:
            assignments.append(f"{name_sql} = NULL")
        else:
            assignments.append(f"{name_sql} = %s")
            params.append(str(value))
    return assignments, params


def _per_job(outcomes: list[Outcome], value: Any, kind: str) -> PerJob:
    """Each outcome's ``value`` for its job's row."""
    return PerJob([(o.job.id, value(o)) for o in outcomes], kind)
