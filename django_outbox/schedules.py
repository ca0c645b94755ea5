"""Cron schedules: ``OUTBOX["SCHEDULES"]`` enqueue a task at each tick of a cron expression.

Every worker may look for due ticks; each tick is enqueued exactly once however many look,
because a schedule's last enqueued tick lives in one row (``ScheduleState``) and only the
worker whose UPDATE moves it from the value it read enqueues, in the same transaction. A
job enqueued for a tick carries the dedup key ``outbox.schedule:<name>:<tick>``.

Ticks missed while no worker ran: ``"missed": "latest"`` (the default) enqueues the latest
one only, ``"all"`` every one (at most MAX_CATCH_UP), ``"skip"`` none but a tick less than
ON_TIME old.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter
from django.conf import settings as django_settings
from django.db import IntegrityError, router, transaction
from django.utils import timezone

from django_outbox import conf
from django_outbox.compat import Task, TaskResult
from django_outbox.db.routing import jobs_of
from django_outbox.jobs.enqueue import build_job, insert_jobs
from django_outbox.jobs.results import resolve_task
from django_outbox.models import ScheduleState

MISSED_POLICIES = ("latest", "all", "skip")
KEYS = ("task", "cron", "timezone", "args", "kwargs", "missed")
#: The most ticks one look enqueues for a schedule with "missed": "all".
MAX_CATCH_UP = 1000
#: A tick this recent is on time, even for "missed": "skip".
ON_TIME = timedelta(seconds=60)
DEDUP_PREFIX = "outbox.schedule:"


@dataclass(frozen=True)
class Schedule:
    name: str
    task: str
    cron: str
    timezone: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    missed: str = "latest"

    def ticks_between(self, after: datetime, until: datetime) -> list[datetime]:
        """Ticks later than ``after`` and not later than ``until``, in UTC, oldest first;
        for "all", at most MAX_CATCH_UP of the latest."""
        zone = zoneinfo.ZoneInfo(self.timezone)
        found: list[datetime] = []
        walker = croniter(self.cron, after.astimezone(zone))
        while True:
            tick: datetime = walker.get_next(datetime)
            if tick > until:
                return found
            found.append(tick.astimezone(UTC))
            if len(found) > MAX_CATCH_UP:
                found.pop(0)

    def next_tick(self, after: datetime) -> datetime:
        zone = zoneinfo.ZoneInfo(self.timezone)
        tick: datetime = croniter(self.cron, after.astimezone(zone)).get_next(datetime)
        return tick.astimezone(UTC)

    def chosen(self, ticks: list[datetime], now: datetime) -> list[datetime]:
        """The due ticks to enqueue, by the schedule's missed-tick policy."""
        if not ticks:
            return []
        if self.missed == "all":
            return ticks
        if self.missed == "skip":
            return [ticks[-1]] if now - ticks[-1] <= ON_TIME else []
        return [ticks[-1]]


def schedules() -> list[Schedule]:
    """The schedules of ``OUTBOX["SCHEDULES"]`` (checked by system check E004)."""
    default_zone = getattr(django_settings, "TIME_ZONE", None) or "UTC"
    found = []
    for name, spec in conf.get().SCHEDULES.items():
        found.append(
            Schedule(
                name=name,
                task=spec["task"],
                cron=spec["cron"],
                timezone=spec.get("timezone") or default_zone,
                args=list(spec.get("args", [])),
                kwargs=dict(spec.get("kwargs", {})),
                missed=spec.get("missed", "latest"),
            )
        )
    return found


def problems(raw: Any) -> list[str]:
    """Every problem with an ``OUTBOX["SCHEDULES"]`` value, as sentences."""
    where = "OUTBOX['SCHEDULES']"
    if not isinstance(raw, Mapping):
        return [f"{where} must be a dict of schedules by name, not {type(raw).__name__}."]
    found = []
    for name, spec in raw.items():
        at = f"{where}[{name!r}]"
        if not isinstance(name, str) or not name or len(name) > 100:
            found.append(f"{at}: a schedule's name must be a string of 1 to 100 characters.")
            continue
        if not isinstance(spec, Mapping):
            found.append(f"{at} must be a dict, not {type(spec).__name__}.")
            continue
        for key in sorted(set(spec) - set(KEYS), key=str):
            found.append(f"{at}[{key!r}] is not a known key (known: {', '.join(KEYS)}).")
        for key in ("task", "cron"):
            if key not in spec:
                found.append(f"{at}[{key!r}] is missing.")
            elif not isinstance(spec[key], str) or not spec[key]:
                found.append(f"{at}[{key!r}] must be a non-empty string, not {spec[key]!r}.")
        cron = spec.get("cron")
        if isinstance(cron, str) and cron and not croniter.is_valid(cron):
            found.append(
                f"{at}['cron']: {cron!r} is not a valid cron expression (five fields: minute "
                "hour day month weekday, e.g. '0 3 * * *')."
            )
        if isinstance(spec.get("task"), str) and spec["task"]:
            found.extend(_task_problems(at, spec))
        if "timezone" in spec:
            try:
                zoneinfo.ZoneInfo(str(spec["timezone"]))
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                found.append(f"{at}['timezone']: {spec['timezone']!r} is not a known time zone.")
        if "missed" in spec and spec["missed"] not in MISSED_POLICIES:
            found.append(
                f"{at}['missed'] must be one of {', '.join(MISSED_POLICIES)}, "
                f"not {spec['missed']!r}."
            )
        if "args" in spec and not isinstance(spec["args"], list | tuple):
            found.append(f"{at}['args'] must be a list, not {type(spec['args']).__name__}.")
        if "kwargs" in spec and not isinstance(spec["kwargs"], Mapping):
            found.append(f"{at}['kwargs'] must be a dict, not {type(spec['kwargs']).__name__}.")
    return found


def _task_problems(at: str, spec: Mapping[str, Any]) -> list[str]:
    from django_outbox.exceptions import TaskNotFound
    from django_outbox.jobs.enqueue import json_arguments

    try:
        task = resolve_task(spec["task"])
    except TaskNotFound as exc:
        return [f"{at}['task']: {exc}"]
    try:
        json_arguments(task, list(spec.get("args", [])), dict(spec.get("kwargs", {})))
    except (TypeError, ValueError) as exc:
        return [f"{at}: {exc}"]
    return []


def enqueue_due(now: datetime | None = None) -> list[TaskResult]:
    """Enqueue the due ticks of every schedule that no other worker has enqueued; returns
    the results of the jobs this call enqueued."""
    now = now or timezone.now()
    enqueued: list[TaskResult] = []
    for schedule in schedules():
        # A schedule's state lives beside its jobs: in its task's alias's database.
        with jobs_of(resolve_task(schedule.task).backend):
            enqueued.extend(_enqueue_schedule(schedule, now))
    return enqueued


def next_due(now: datetime | None = None) -> datetime | None:
    """When the next tick of any schedule falls (None: no schedules)."""
    now = now or timezone.now()
    by_backend: dict[str, list[Schedule]] = {}
    for schedule in schedules():
        by_backend.setdefault(resolve_task(schedule.task).backend, []).append(schedule)
    upcoming = []
    for backend, group in by_backend.items():
        with jobs_of(backend):  # one read per database
            states = dict(ScheduleState.objects.values_list("name", "last_tick"))
        upcoming += [s.next_tick(max(states.get(s.name) or now, now)) for s in group]
    return min(upcoming, default=None)


def _enqueue_schedule(schedule: Schedule, now: datetime) -> list[TaskResult]:
    using = router.db_for_write(ScheduleState)
    last = _last_tick(schedule.name, now, using)
    ticks = schedule.ticks_between(last, now)
    if not ticks:
        return []
    task = resolve_task(schedule.task)
    with transaction.atomic(using=using):
        moved = (
            ScheduleState.objects.using(using)
            .filter(name=schedule.name, last_tick=last)
            .update(last_tick=ticks[-1])
        )
        if not moved:
            return []  # another worker took these ticks
        jobs = [_job(task, schedule, tick) for tick in schedule.chosen(ticks, now)]
        return insert_jobs(task, jobs)


def _last_tick(name: str, now: datetime, using: str) -> datetime:
    """The schedule's last enqueued tick; a schedule seen for the first time starts now."""
    found = ScheduleState.objects.using(using).filter(name=name).first()
    if found is not None:
        return found.last_tick
    try:
        with transaction.atomic(using=using):
            ScheduleState.objects.using(using).create(name=name, last_tick=now)
    except IntegrityError:  # another worker saw it first
        return ScheduleState.objects.using(using).get(name=name).last_tick
    return now


def _job(task: Task, schedule: Schedule, tick: datetime) -> Any:
    job = build_job(task.using(run_after=tick), schedule.args, schedule.kwargs)
    job.dedup_key = f"{DEDUP_PREFIX}{schedule.name}:{tick:%Y-%m-%dT%H:%M:%SZ}"
    return job
