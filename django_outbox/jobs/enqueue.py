"""Insert jobs inside the caller's transaction: a rollback leaves no job behind.

The one path every job row takes: ``enqueue``, ``enqueue_many``, unique jobs, schedule
ticks (``insert_jobs``) and webhook fan-outs (``enqueue_select``). So each job gets the
same validation, defaults, trace context, wake-up on commit, metric and ``task_enqueued``.
That is why it is one module of over 400 lines: split, the paths would drift apart.

A bulk enqueue of jobs that differ only in their arguments (``enqueue_many`` without
concurrency or sequence keys) writes rows, not model instances: each column the jobs share
is adapted once, each job's arguments are encoded once (``db.inserts.insert_alike``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from operator import itemgetter
from typing import Any

from django.db import connections, router, transaction
from django.db.models import JSONField
from django.db.models.base import ModelState
from django.utils import timezone

from django_outbox import conf, telemetry
from django_outbox.compat import InvalidTask, Task, TaskResult, normalize_json, task_enqueued
from django_outbox.db import dialect, named
from django_outbox.db.inserts import Batches, rows_per_statement
from django_outbox.exceptions import InvalidTaskArguments, TaskNotFound
from django_outbox.jobs import dedup, keys
from django_outbox.jobs.jsonvalues import json_text
from django_outbox.jobs.observers import heard
from django_outbox.jobs.results import build_result, resolve_task, to_task_result
from django_outbox.lib.collector import collector_paused
from django_outbox.lib.resultids import TOKEN_MAX, new_token, new_tokens
from django_outbox.models import Job, JobStatus
from django_outbox.task import OutboxTask
from django_outbox.wake.notify import notify_on_commit

#: Rows per INSERT statement in a bulk enqueue.
CHUNK_SIZE = 1000


def json_arguments(
    task: Task, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments as they will be stored and passed to the task, or InvalidTaskArguments.

    Tuples become lists, as they would after any JSON round trip; everything else that
    JSON cannot hold exactly (datetimes, sets, objects, NaN) is refused here, at enqueue,
    rather than failing later in a worker.
    """
    normal_args, normal_kwargs, _, _ = json_argument_texts(task, args, kwargs)
    return normal_args, normal_kwargs


def json_argument_texts(
    task: Task, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any], str, str]:
    """``json_arguments``, and the JSON text of each, as they are stored."""
    size = 0
    args_text = kwargs_text = ""
    flat = _flat(args) and _flat_keywords(kwargs)  # JSON's already: nothing to normalise
    try:
        normal_args: list[Any]
        normal_kwargs: dict[str, Any]
        if flat:
            normal_args, normal_kwargs = list(args), dict(kwargs)
        else:
            normal_args = normalize_json(list(args))  # type: ignore[assignment]
            normal_kwargs = normalize_json(dict(kwargs))  # type: ignore[assignment]
        problem, args_text, size = json_text(normal_args)
        if problem is None:
            problem, kwargs_text, kwargs_size = json_text(normal_kwargs)
            size += kwargs_size + 4  # as the two in one list: "[", ", " and "]"
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    except RecursionError:
        problem = "they are nested too deeply, or contain themselves"
    if problem is not None:
        raise InvalidTaskArguments(
            f"Arguments to task {task.module_path!r} must be JSON-serialisable "
            f"(str, int, float, bool, None, lists and dicts of them): {problem}"
        )
    limit = conf.get().MAX_ARGUMENTS_BYTES
    if size > limit:
        raise InvalidTaskArguments(
            f"Arguments to task {task.module_path!r} are {size:,} bytes as JSON, over "
            f"OUTBOX['MAX_ARGUMENTS_BYTES'] ({limit:,} bytes). Store large data elsewhere (a "
            "model, a file) and pass its key."
        )
    if not flat and (_has_non_string_key(normal_kwargs) or _has_non_string_key(normal_args)):
        raise InvalidTaskArguments(
            f"Arguments to task {task.module_path!r} use a dict key that is not a string; "
            "JSON would turn it into one, so the task would not get what was sent."
        )
    return normal_args, normal_kwargs, args_text, kwargs_text


#: Values JSON holds as they are (a float may still be NaN: the encoder refuses it).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat(values: Sequence[Any]) -> bool:
    """A tuple or list of scalars: what most calls pass. (A loop, not ``all()`` over a
    generator: most calls pass none or a few, and the generator cost more than the look.)"""
    if type(values) not in (tuple, list):
        return False
    for value in values:  # noqa: SIM110 (see the docstring)
        if type(value) not in _SCALARS:
            return False
    return True


def _flat_keywords(values: dict[str, Any]) -> bool:
    if type(values) is not dict:
        return False
    for key, value in values.items():
        if type(key) is not str or type(value) not in _SCALARS:
            return False
    return True


def _has_non_string_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(
            not isinstance(key, str) or _has_non_string_key(item) for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_has_non_string_key(item) for item in value)
    return False


def build_job(
    task: Task, args: Sequence[Any], kwargs: dict[str, Any], now: datetime | None = None
) -> Job:
    """The job row of one call of ``task``, not yet written; InvalidTaskArguments for
    arguments JSON cannot hold."""
    return build_jobs([(task, args, kwargs)], now)[0]


def build_jobs(
    calls: Sequence[tuple[Task, Sequence[Any], dict[str, Any]]], now: datetime | None = None
) -> list[Job]:
    """``build_job`` of each ``(task, args, kwargs)``: each task's options are read once,
    into a job that every call of it copies (a model's ``__init__`` sets each of its
    thirty fields, which cost a bulk write more than the rest of a job)."""
    now = now or timezone.now()
    #: id(task) -> its template, and whether its calls may have a concurrency or sequence key.
    templates: dict[int, tuple[Job, bool]] = {}
    jobs = []
    for (task, args, kwargs), token in zip(calls, new_tokens(len(calls)), strict=True):
        known = templates.get(id(task))
        if known is None:
            keyed = isinstance(task, OutboxTask) and (
                task.concurrency_key is not None or task.sequence_key is not None
            )
            known = templates[id(task)] = (_template(task, now), keyed)
        template, keyed = known
        normal_args, normal_kwargs = json_arguments(task, args, kwargs)
        job = _copy(template)
        job.args, job.kwargs, job.token = normal_args, normal_kwargs, token
        if keyed:
            assert isinstance(task, OutboxTask)
            job.limit_key = task.limit_key_for(args, kwargs)
            if job.limit_key is not None:
                job.status = JobStatus.HELD  # queued by keys.admit() when its key's turn comes
        jobs.append(job)
    return jobs


def importable(task: Task) -> None:
    """InvalidTask unless a worker can import ``task`` by its path, as it will to run it.
    Django refuses a nested function when the task is defined; a function defined in
    ``manage.py shell`` or in a script run as ``__main__`` is at the top of a module that
    no worker has, and would fail every attempt with TaskNotFound."""
    module_name = task.module_path.rpartition(".")[0]
    try:
        # A script's __main__ is not the worker's: its tasks are never found there.
        found = None if module_name == "__main__" else resolve_task(task.module_path)
    except TaskNotFound:
        found = None
    if found is not None and found.func is task.func:
        return
    where = {
        "__main__": "in a script run as __main__",
        "django.core.management.commands.shell": "in manage.py shell",
        "None": "at an interactive prompt",
    }.get(module_name, f"where a worker importing {module_name!r} would not find it")
    raise InvalidTask(
        f"Task {task.module_path!r} was defined {where}: a worker imports a task by its "
        "module path, so define it in a module of your project (e.g. myapp/tasks.py) and "
        "import it from there."
    )


def _template(task: Task, now: datetime) -> Job:
    """A job of ``task`` with its options and the settings' defaults, and no arguments."""
    importable(task)
    settings = conf.get()
    options = task if isinstance(task, OutboxTask) else None
    return Job(
        backend=task.backend,
        queue=task.queue_name,
        task_path=task.module_path,
        priority=task.priority,
        run_at=task.run_after or now,
        run_after=task.run_after,
        enqueued_at=now,
        max_attempts=(options and options.max_attempts) or settings.DEFAULT_MAX_ATTEMPTS,
        timeout=options.timeout if options else None,
        backoff_base=(options and options.backoff_base) or settings.BACKOFF_BASE,
        backoff_cap=(options and options.backoff_cap) or settings.BACKOFF_CAP,
    )


def _copy(template: Job) -> Job:
    """A new, unsaved job with ``template``'s values (its lists its own)."""
    job = Job.__new__(Job)
    values = dict(template.__dict__)  # a copy, then given whole: faster than update()
    values["_state"] = ModelState()
    values["errors"], values["worker_ids"] = [], []
    job.__dict__ = values
    return job


def enqueue(task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
    job = build_job(task, args, kwargs)
    key = task.unique_key_for(args, kwargs) if isinstance(task, OutboxTask) else None
    if key is None:
        return insert_jobs(task, [job], alone=job.limit_key is None)[0]
    using = router.db_for_write(Job)
    with telemetry.enqueue_span(job.task_path, job.queue) as trace_context:
        job.trace_context = trace_context
        with _under_keys(task, [job], using):
            existing = _insert_unique(job, key)
        if existing is not None:
            return existing  # nothing enqueued, no signal
    return _announce(task, [job], using)[0]


@contextmanager
def _under_keys(task: Task, jobs: list[Job], using: str) -> Iterator[None]:
    """Around the insert of ``jobs``: where some have a concurrency or sequence key, in a
    transaction, lock the keys first and queue the held jobs whose turn has come after
    (jobs/keys.py); else nothing."""
    limit_keys = {job.limit_key for job in jobs if job.limit_key is not None}
    if not limit_keys:
        yield
        return
    assert isinstance(task, OutboxTask)
    now = timezone.now()
    with transaction.atomic(using=using):
        keys.enter(using, dict.fromkeys(limit_keys, keys.rule_of(task)), now)
        yield
        keys.admit(using, limit_keys, now)


def insert_jobs(task: Task, jobs: list[Job], alone: bool = False) -> list[TaskResult]:
    """Insert jobs made by ``build_job`` (and, say, given a dedup key) in the caller's
    transaction: one INSERT per CHUNK_SIZE rows, all or none, in a savepoint of their own
    (a failure can be caught without losing the caller's transaction). ``alone``: one job,
    one INSERT and nothing else, as ``enqueue()`` writes it."""
    using = router.db_for_write(Job)
    with telemetry.enqueue_span(task.module_path, task.queue_name, len(jobs)) as trace_context:
        if trace_context is not None:
            for job in jobs:
                job.trace_context = trace_context
        if alone:
            (job,) = jobs
            job.save(using=using, force_insert=True)
        else:
            with transaction.atomic(using=using), _under_keys(task, jobs, using):
                _insert_many(jobs, using)
    return _announce(task, jobs, using)


def insert_steps(calls: Sequence[tuple[Task, Job]], results: bool = True) -> list[TaskResult]:
    """Insert a workflow's step jobs (made by ``build_jobs``, of several tasks) in the
    caller's transaction, one INSERT per CHUNK_SIZE rows, all or none; returns their
    results in order (``results=False``: [], and a TaskResult is built only for someone
    who hears ``task_enqueued``). Only the queued ones signal their queues on commit: a
    waiting step is signalled when it is queued (jobs/steps.py)."""
    return insert_step_batches(calls[0][0], len(calls), [calls], results)


#: What a caller of ``insert_step_batches`` does with each batch once its jobs have their
#: keys: it may send statements of its own in the same ``Batches`` (the step rows).
Written = Callable[[Batches, list[Job]], None]


def insert_step_batches(
    first: Task,
    count: int,
    batches: Iterable[Sequence[tuple[Task, Job]]],
    results: bool = True,
    written: Written | None = None,
) -> list[TaskResult]:
    """``insert_steps`` of ``count`` step jobs that ``batches`` gives a batch at a time as
    the caller makes them (``first``: the task of the first; the trace names it): each is
    made while the server writes the one before (``Batches``). ``written`` is called
    with each batch, in order, once its jobs have their keys."""
    using = router.db_for_write(Job)
    per = rows_per_statement(using, len(_INSERTED_FIELDS), CHUNK_SIZE)
    calls: list[tuple[Task, Job]] = []
    with (
        telemetry.enqueue_span(first.module_path, first.queue_name, count) as trace_context,
        transaction.atomic(using=using),
        Batches(using) as sent,
    ):

        def keyed(jobs: list[Job]) -> Callable[[list[int]], None]:
            def then(keys: list[int]) -> None:
                given_keys(jobs, keys, using)
                if written is not None:
                    written(sent, jobs)

            return then

        for batch in batches:
            for start in range(0, len(batch), per):
                part = batch[start : start + per]
                jobs = [job for _, job in part]
                if trace_context is not None:
                    for job in jobs:
                        job.trace_context = trace_context
                send_jobs(sent, jobs, keyed(jobs))
                calls.extend(part)
        sent.flush()
    by_task: dict[int, tuple[Task, list[Job]]] = {}
    for task, job in calls:
        by_task.setdefault(id(task), (task, []))[1].append(job)
    made: dict[int, TaskResult] = {}
    for task, of_task in by_task.values():
        announced = _announce(task, of_task, using, results)
        if results:
            made.update(zip((job.pk for job in of_task), announced, strict=True))
    return [made[job.pk] for _, job in calls] if results else []


def _insert_many(jobs: list[Job], using: str) -> None:
    """Insert ``jobs``, one INSERT per CHUNK_SIZE rows, and give each its primary key; each
    batch is made while the server writes the one before (``Batches``)."""
    # Every column is a parameter of each row where rows are spelled out (not PostgreSQL).
    per = rows_per_statement(using, len(_INSERTED_FIELDS), CHUNK_SIZE)
    with Batches(using) as batches:
        for start in range(0, len(jobs), per):
            batch = jobs[start : start + per]
            send_jobs(batches, batch, partial(given_keys, batch, using=using))
        batches.flush()


def send_jobs(batches: Batches, jobs: list[Job], then: Callable[[list[int]], None]) -> None:
    """Send the INSERT of ``jobs`` (at most ``rows_per_statement`` of all the job's
    columns); their keys go to ``then`` (``Batches.insert_alike``).

    Rows, not model instances, as ``insert_alike`` writes them: a column every job holds
    the same value in (the backend, the times, most options) is given once, the others
    as each job's stored form."""
    connection = batches.connection
    shared: dict[str, Any] = {}
    # Each job's values in one C call (its attributes sit behind the model's descriptors),
    # then by column: jobs built from one template share most values, often the very same
    # object, which list.count finds at C speed. The token is drawn for each job: and a
    # row needs one column of its own.
    rows = list(map(_INSERTED_VALUES, (job.__dict__ for job in jobs)))
    varying: list[tuple[Any, tuple[Any, ...]]] = []
    for field, column in zip(_INSERTED_FIELDS, zip(*rows, strict=True), strict=True):
        if field is not _TOKEN and column.count(column[0]) == len(column):
            shared[field.name] = column[0]
        else:
            varying.append((field, column))
    stored = [[_stored(field, value, connection) for value in column] for field, column in varying]
    names = [field.name for field, _ in varying]
    batches.insert_alike("enqueue", Job, shared, names, list(zip(*stored, strict=True)), then)


def given_keys(jobs: list[Job], keys: list[int], using: str) -> None:
    """Each of ``jobs``, just inserted, takes its primary key: it is saved."""
    for job, pk in zip(jobs, keys, strict=True):
        job.id = pk
        job._state.adding, job._state.db = False, using


#: The job's columns an insert writes: all but the primary key.
_INSERTED_FIELDS = [field for field in Job._meta.concrete_fields if not field.primary_key]
_INSERTED_VALUES = itemgetter(*(field.attname for field in _INSERTED_FIELDS))
_TOKEN = Job._meta.get_field("token")


#: Values a non-JSON field stores as they are (its adaptation would only wrap them).
_AS_THEY_ARE = frozenset({int, str, float})


def _stored(field: Any, value: Any, connection: Any) -> Any:
    """``value`` of ``field`` as ``insert_alike`` takes a row's values: JSON as its text,
    the rest as the field adapts it for the database."""
    if value is None:
        return None
    if isinstance(field, JSONField):
        return json_text(value)[1]
    if type(value) in _AS_THEY_ARE:
        return value
    return field.get_db_prep_save(value, connection)


def _announce(task: Task, jobs: list[Job], using: str, results: bool = True) -> list[TaskResult]:
    """What follows every insert: the wake-up on commit, the metric, ``task_enqueued``;
    returns the jobs' results (``results=False``: only if someone hears the signal)."""
    # A set: the jobs of one call mostly share their queue and due time (the same objects).
    notify_on_commit(
        {(job.queue, job.run_at) for job in jobs if job.status == JobStatus.QUEUED}, using=using
    )
    telemetry.enqueued(task.module_path, task.queue_name, len(jobs))
    if not results and not heard(task_enqueued, logging.DEBUG):
        return []
    made = [to_task_result(job, task) for job in jobs]
    backend_class = type(task.get_backend())
    for result in made:
        task_enqueued.send(backend_class, task_result=result)
    return made


def enqueue_select(
    task: Task,
    *,
    args_sql: str,
    dedup_key_sql: str,
    source_sql: str,
    params: Sequence[Any],
    now: datetime | None = None,
    limit_key_sql: str | None = None,
) -> int:
    """Enqueue one job of ``task`` per row of ``source_sql`` ("FROM … WHERE …"), in one
    ``INSERT … SELECT`` whatever the number of rows; returns how many.

    ``args_sql``: each job's positional arguments, an SQL expression over the row giving a
    JSON array; ``dedup_key_sql``: each job's dedup key; ``limit_key_sql``: each job's
    ``limit_key`` (jobs/keys.py), if any: the jobs are then held, and the caller locks
    their keys before and admits them after (``keys.enter``, ``keys.admit``). ``params``:
    the parameters of those expressions and the source's, in that order. Every job gets the
    task's options and the settings' defaults, the trace context, a wake-up on commit, the
    metric and ``task_enqueued``, as any enqueue does. The rows come back to Python only
    when someone receives ``task_enqueued``.
    """
    using = router.db_for_write(Job)
    connection = connections[using]
    quote = connection.ops.quote_name
    template = build_job(task, [], {}, now)
    limit_key_sql = limit_key_sql or "NULL"
    if limit_key_sql != "NULL":
        template.status = JobStatus.HELD
    heard_by_someone = heard(task_enqueued, logging.DEBUG)
    if heard_by_someone and not dialect(using).insert_returning:
        return _select_then_insert(
            task, template, args_sql, dedup_key_sql, limit_key_sql, source_sql, params
        )
    with telemetry.enqueue_span(task.module_path, task.queue_name, None) as trace_context:
        template.trace_context = trace_context
        fields = [Job._meta.get_field(name) for name in _SELECT_CONSTANTS]
        values = [
            field.get_db_prep_save(getattr(template, field.attname), connection)  # type: ignore[union-attr]
            for field in fields
        ]
        columns = [
            *(str(field.column) for field in fields),  # type: ignore[union-attr]
            "args",
            "dedup_key",
            "limit_key",
            "token",
        ]
        args = dialect(using).text(quote("args"))
        returning = f" RETURNING {quote('id')}, {quote('token')}, {args}"
        sql = named(
            "enqueue-select",
            f"INSERT INTO {quote(Job._meta.db_table)} ({', '.join(map(quote, columns))}) "
            f"SELECT {', '.join(['%s'] * len(values))}, {args_sql}, {dedup_key_sql}, "
            f"{limit_key_sql}, "
            f"{dialect(using).random_token(TOKEN_MAX)} {source_sql}"
            f"{returning if heard_by_someone else ''}",
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*values, *params])
            rows = cursor.fetchall() if heard_by_someone else []
            count = len(rows) if heard_by_someone else int(cursor.rowcount)
    if not count:
        return 0
    if not heard_by_someone:
        if template.status == JobStatus.QUEUED:
            notify_on_commit([(template.queue, template.run_at)], using=using)
        telemetry.enqueued(task.module_path, task.queue_name, count)
        return count
    jobs = []
    for pk, token, args in rows:
        job = _copy(template)
        job.pk, job.token, job.args = pk, token, json.loads(args)
        job._state.adding, job._state.db = False, using
        jobs.append(job)
    _announce(task, jobs, using)
    return count


def _select_then_insert(
    task: Task,
    template: Job,
    args_sql: str,
    dedup_key_sql: str,
    limit_key_sql: str,
    source_sql: str,
    params: Sequence[Any],
) -> int:
    """``enqueue_select`` where an INSERT returns nothing and someone hears
    ``task_enqueued`` (MySQL): the rows' arguments and keys read first, then the jobs
    inserted as ``enqueue_many`` inserts them, whose ids are known (an INSERT … SELECT's
    may have gaps). Two statements, however many rows."""
    using = router.db_for_write(Job)
    with connections[using].cursor() as cursor:
        cursor.execute(
            named(
                "enqueue-select",
                f"SELECT {args_sql}, {dedup_key_sql}, {limit_key_sql} {source_sql}",
            ),
            params,
        )
        rows = cursor.fetchall()
    jobs = []
    for args, key, limit_key in rows:
        job = _copy(template)
        job.args, job.dedup_key, job.token = json.loads(args), key, new_token()
        job.limit_key = limit_key
        jobs.append(job)
    if jobs:
        insert_jobs(task, jobs)
    return len(jobs)


#: The columns ``enqueue_select`` writes with the same value in every row.
_SELECT_CONSTANTS = (
    "backend",
    "queue",
    "task_path",
    "kwargs",
    "priority",
    "status",
    "run_at",
    "run_after",
    "attempts",
    "max_attempts",
    "timeout",
    "backoff_base",
    "backoff_cap",
    "worker_ids",
    "errors",
    "enqueued_at",
    "trace_context",
)


def _insert_unique(job: Job, key: str) -> TaskResult | None:
    """Insert ``job`` under ``key`` unless an active job holds the key; then return that
    job's result instead.

    One insert that does nothing where the key is held
    (``Dialect.insert_unless_conflicting``), against the unique index on active dedup keys.
    On PostgreSQL and MariaDB, an INSERT that meets a key another transaction has just
    written waits for that transaction: if it commits, this one inserts nothing; if it
    rolls back, this one inserts. The holder can finish between the conflict and the
    read that finds it: then the insert is tried again.
    """
    job.dedup_key = key
    using = router.db_for_write(Job)
    connection = connections[using]
    quote = connection.ops.quote_name
    fields = [field for field in Job._meta.concrete_fields if not field.primary_key]
    columns = ", ".join(quote(str(field.column)) for field in fields)
    values = [field.get_db_prep_save(getattr(job, field.attname), connection) for field in fields]
    table = quote(Job._meta.db_table)
    for _ in range(UNIQUE_TRIES):
        pk = dialect(using).insert_unless_conflicting(
            connection, "enqueue-unique", table, columns, values
        )
        if pk is not None:
            job.pk = pk
            job._state.adding, job._state.db = False, using
            return None
        found = dedup.active_with_keys(using, [key]).first()
        if found is not None:
            return to_task_result(found)
    raise RuntimeError(
        f"Could not enqueue the job with unique key {key!r}: the job holding it kept "
        f"finishing as this one was inserted ({UNIQUE_TRIES} tries)."
    )


#: Inserts tried for a unique job before giving up (each lost to a job just finishing).
UNIQUE_TRIES = 5


def enqueue_many(
    task: Task, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]
) -> list[TaskResult]:
    """Enqueue one job per ``(args, kwargs)``: one INSERT per 1,000 rows, all or none.

    A task with a unique key is enqueued call by call instead (each may find its key held).
    """
    if isinstance(task, OutboxTask) and task.unique_key is not None:
        with transaction.atomic(using=router.db_for_write(Job)):
            return [enqueue(task, args, kwargs) for args, kwargs in _pairs(calls)]
    now = timezone.now()
    pairs = _pairs(calls)
    if isinstance(task, OutboxTask) and (
        task.concurrency_key is not None or task.sequence_key is not None
    ):
        return insert_jobs(task, [build_job(task, args, kwargs, now) for args, kwargs in pairs])
    with collector_paused():
        return _insert_alike(task, pairs, now)


def _insert_alike(
    task: Task, pairs: list[tuple[Sequence[Any], dict[str, Any]]], now: datetime
) -> list[TaskResult]:
    """``enqueue_many`` of jobs that differ only in their arguments (and token): what
    ``insert_jobs`` writes, without a model instance per job. One INSERT per CHUNK_SIZE
    rows (``insert_alike``: every other column given once), all or none, in a savepoint
    of their own; then the wake-up on commit, the metric and ``task_enqueued``."""
    template = build_job(task, [], {}, now)  # every column but the arguments and token
    arguments = [json_argument_texts(task, args, kwargs) for args, kwargs in pairs]
    tokens = new_tokens(len(arguments))
    using = router.db_for_write(Job)
    with telemetry.enqueue_span(task.module_path, task.queue_name, len(pairs)) as trace_context:
        template.trace_context = trace_context
        shared = {
            field.name: getattr(template, field.attname)
            for field in Job._meta.concrete_fields
            if not field.primary_key and field.name not in _VARYING
        }
        rows = [(a, k, token) for (_, _, a, k), token in zip(arguments, tokens, strict=True)]
        per = rows_per_statement(using, len(shared) + len(_VARYING), CHUNK_SIZE)
        results: list[TaskResult] = []

        def made(ids: list[int]) -> None:
            # A batch's results are made while the server writes the next (Batches).
            start = len(results)
            end = start + len(ids)
            results.extend(
                _queued_result(task, pk, token, args, kwargs, now)
                for pk, token, (args, kwargs, _, _) in zip(
                    ids, tokens[start:end], arguments[start:end], strict=True
                )
            )

        with transaction.atomic(using=using), Batches(using) as batches:
            for start in range(0, len(rows), per):
                batches.insert_alike(
                    "enqueue", Job, shared, _VARYING, rows[start : start + per], made
                )
            batches.flush()
    if template.status == JobStatus.QUEUED and results:
        notify_on_commit([(template.queue, template.run_at)], using=using)
    telemetry.enqueued(task.module_path, task.queue_name, len(results))
    if heard(task_enqueued, logging.DEBUG):
        backend_class = type(task.get_backend())
        for result in results:
            task_enqueued.send(backend_class, task_result=result)
    return results


def _queued_result(
    task: Task, pk: int, token: int, args: Any, kwargs: Any, now: datetime
) -> TaskResult:
    """The result of a job just enqueued with these arguments."""
    return build_result(
        task=task,
        job_id=pk,
        token=token,
        status=JobStatus.QUEUED,
        args=args,
        kwargs=kwargs,
        errors=[],
        worker_ids=[],
        enqueued_at=now,
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
    )


#: The columns of ``_insert_alike``'s rows: the rest are the same in every row.
_VARYING = ("args", "kwargs", "token")


def _pairs(
    calls: Iterable[tuple[Sequence[Any], dict[str, Any]]],
) -> list[tuple[Sequence[Any], dict[str, Any]]]:
    pairs = []
    for position, call in enumerate(calls):
        try:
            args, kwargs = call
        except (TypeError, ValueError):
            raise InvalidTaskArguments(
                f"enqueue_many takes (args, kwargs) pairs; item {position} is {call!r}."
            ) from None
        pairs.append((args, kwargs))
    return pairs
