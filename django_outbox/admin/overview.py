"""What the dashboard shows, read with bounded queries.

Every query is limited by a time window or by an index over live rows only, so the page
costs the same with a thousand jobs or a million:

- queue counts read the active rows (queued, running, waiting and held) through their
  partial indexes,
  and failures of the last 24 h through the partial index on failed rows; every queue
  the settings name has its line, jobs or not, and so has every paused queue (with the
  time it was paused, from its QueueState row);
- throughput reads the jobs finished in the last 60 minutes (index on finished_at);
- wait and run times come from the latest ``SAMPLE`` jobs finished in the last hour;
- webhook health reads the endpoints' hourly counts of the last 24 h, not the attempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import quantiles

from django.db import router
from django.db.models import BooleanField, CharField, Count, DateTimeField, Min, Q, QuerySet, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import TruncMinute
from django.db.models.lookups import GreaterThanOrEqual, IsNull
from django.utils import timezone

from django_outbox import conf, health, queues
from django_outbox.compat import InvalidTaskBackend, task_backends
from django_outbox.db import dialect
from django_outbox.models import Endpoint, EndpointHour, Job, JobStatus, Worker
from django_outbox.models.jobs import PENDING_STATUSES

#: Jobs read for the wait and run time percentiles.
SAMPLE = 5000
#: The failures listed.
RECENT_FAILURES = 20


@dataclass
class QueueLine:
    queue: str
    queued: int = 0
    scheduled: int = 0
    running: int = 0
    #: Workflow steps waiting on the steps before them.
    waiting: int = 0
    #: Jobs held behind their concurrency or sequence key.
    held: int = 0
    failed_24h: int = 0
    oldest_due: datetime | None = None
    #: When the queue was paused (django_outbox.queues); None: it runs.
    paused_at: datetime | None = None


@dataclass(frozen=True)
class Minute:
    at: datetime
    succeeded: int
    failed: int


@dataclass(frozen=True)
class Percentiles:
    jobs: int
    wait_p50: float | None
    wait_p95: float | None
    run_p50: float | None
    run_p95: float | None


@dataclass(frozen=True)
class EndpointHealth:
    endpoint: Endpoint
    attempts_24h: int
    succeeded_24h: int

    @property
    def success_rate(self) -> float | None:
        return self.succeeded_24h / self.attempts_24h if self.attempts_24h else None


@dataclass
class Overview:
    now: datetime
    queues: list[QueueLine] = field(default_factory=list)
    minutes: list[Minute] = field(default_factory=list)
    times: Percentiles | None = None
    workers: list[Worker] = field(default_factory=list)
    endpoints: list[EndpointHealth] = field(default_factory=list)
    failures: list[Job] = field(default_factory=list)


def _failed_column() -> str:
    return dialect(router.db_for_read(Job)).failed_finished_column


def failed_at(column: str | None = None) -> RawSQL:
    """When a failed job failed, in the terms of the index of failed rows: on MariaDB and
    MySQL its column is a generated one (NULL but for failed rows), which a query must name."""
    column = column or _failed_column()
    return RawSQL(f"{Job._meta.db_table}.{column}", (), output_field=DateTimeField())


def failed_jobs(since: datetime | None = None) -> QuerySet[Job]:
    """Failed jobs (finished at ``since`` or later), newest first can be read by
    ``order_by(failed_at().desc())``, through the index of failed rows."""
    column = _failed_column()
    when = failed_at(column)
    bound = IsNull(when, False) if since is None else GreaterThanOrEqual(when, since)
    if column != "finished_at":
        # NULL but for failed rows: naming the status too would let MariaDB read every
        # failed row kept, through an index led by the status, and sort them.
        return Job.objects.filter(bound)
    return Job.objects.filter(bound, status=JobStatus.FAILED)


def pending_jobs() -> QuerySet[Job]:
    """Waiting steps and held jobs, in the terms of their partial index's condition, its
    statuses written out: SQLite uses a partial index only for a query that states its
    condition in the same terms, and a bound parameter is not. (MariaDB and MySQL read
    them through the claim index, led by the status.)"""
    statuses = ", ".join(f"'{status.value}'" for status in PENDING_STATUSES)
    pending = RawSQL(f"{Job._meta.db_table}.status IN ({statuses})", (), BooleanField())
    return Job.objects.filter(pending)


def overview(now: datetime | None = None) -> Overview:
    now = now or timezone.now()
    return Overview(
        now=now,
        queues=queue_lines(now),
        minutes=throughput(now),
        times=times(now),
        workers=workers(now),
        endpoints=endpoint_health(now),
        failures=list(
            failed_jobs()
            .order_by(failed_at().desc())
            .only("id", "task_path", "queue", "finished_at", "errors")[:RECENT_FAILURES]
        ),
    )


def configured_queues() -> set[str]:
    """The queues the settings name: ``OUTBOX["QUEUES"]``, and the ``QUEUES`` of each
    ``TASKS`` backend of ours (the webhook deliveries' queue among them)."""
    from django_outbox.backend import OutboxBackend

    names = set(conf.get().QUEUES)
    for alias in task_backends:
        try:
            backend = task_backends[alias]
        except InvalidTaskBackend:
            continue  # Django's own check names what is wrong with it
        if isinstance(backend, OutboxBackend):
            names.update(backend.queues)
    return names


def queue_lines(now: datetime) -> list[QueueLine]:
    """A line per configured queue, even one without jobs yet, per paused queue, and per
    queue that has jobs queued, running, waiting, held or failed in the last 24 h."""
    lines: dict[str, QueueLine] = {queue: QueueLine(queue) for queue in configured_queues()}

    def line(queue: str) -> QueueLine:
        return lines.setdefault(queue, QueueLine(queue))

    # One query per status, each through its own partial index (an IN of both statuses
    # matches neither index and scans the table).
    queued = (
        Job.objects.filter(status=JobStatus.QUEUED)
        .values("queue")
        .annotate(
            total=Count("id"),
            due=Count("id", filter=Q(run_at__lte=now)),
            oldest=Min("run_at", filter=Q(run_at__lte=now)),
        )
    )
    for row in queued:
        entry = line(row["queue"])
        entry.queued, entry.scheduled = row["due"], row["total"] - row["due"]
        entry.oldest_due = row["oldest"]
    running = (
        Job.objects.filter(status=JobStatus.RUNNING).values("queue").annotate(total=Count("id"))
    )
    for busy in running:
        line(busy["queue"]).running = busy["total"]
    for pending in pending_jobs().values("queue", "status").annotate(total=Count("id")):
        setattr(line(pending["queue"]), pending["status"], pending["total"])
    failed_counts = (
        failed_jobs(since=now - timedelta(hours=24)).values("queue").annotate(total=Count("id"))
    )
    for failed in failed_counts:
        line(failed["queue"]).failed_24h = failed["total"]
    for queue, paused_at in queues.paused().items():
        line(queue).paused_at = paused_at
    return sorted(lines.values(), key=lambda entry: entry.queue)


def throughput(now: datetime) -> list[Minute]:
    """Jobs finished in each of the last 60 minutes, oldest first."""
    start = (now - timedelta(minutes=59)).replace(second=0, microsecond=0)
    # The status in the terms of the index of finished rows (on MariaDB, its generated
    # column), so the count reads that index alone.
    column = dialect(router.db_for_read(Job)).finished_status_column
    rows = (
        Job.objects.filter(finished_at__gte=start)
        .annotate(
            minute=TruncMinute("finished_at"),
            ended_as=RawSQL(f"{Job._meta.db_table}.{column}", (), output_field=CharField()),
        )
        .values("minute", "ended_as")
        .annotate(total=Count("id"))
    )
    counts: dict[tuple[datetime, str], int] = {}
    for row in rows:
        counts[(row["minute"], row["ended_as"])] = row["total"]
    minutes = []
    for offset in range(60):
        at = start + timedelta(minutes=offset)
        minutes.append(
            Minute(
                at,
                counts.get((at, JobStatus.SUCCEEDED), 0),
                counts.get((at, JobStatus.FAILED), 0),
            )
        )
    return minutes


def times(now: datetime) -> Percentiles:
    """Wait (due to picked up) and run (picked up to finished) times, p50 and p95, of the
    latest SAMPLE jobs finished in the last hour."""
    rows = list(
        Job.objects.filter(finished_at__gte=now - timedelta(hours=1))
        .exclude(last_attempted_at=None)
        .order_by("-finished_at")
        .values_list("run_at", "last_attempted_at", "finished_at")[:SAMPLE]
    )
    waits, runs = [], []
    for due, picked, done in rows:
        if picked is not None and done is not None:
            waits.append(max(0.0, (picked - due).total_seconds()))
            runs.append(max(0.0, (done - picked).total_seconds()))
    wait_p50, wait_p95 = _p50_p95(waits)
    run_p50, run_p95 = _p50_p95(runs)
    return Percentiles(len(rows), wait_p50, wait_p95, run_p50, run_p95)


def _p50_p95(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    if len(values) == 1:
        return values[0], values[0]
    cuts = quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[94]


def workers(now: datetime) -> list[Worker]:
    """Running workers, and those that went silent in the last 24 h (flagged dead)."""
    return list(
        Worker.objects.filter(
            stopped_at=None, heartbeat_at__gte=now - timedelta(hours=24)
        ).order_by("hostname", "pid")[:200]
    )


def is_alive(worker: Worker, now: datetime) -> bool:
    return health.live(worker, now)


def endpoint_health(now: datetime) -> list[EndpointHealth]:
    """Endpoints attempted in the last 24 hours (counted by the hour), failing, or
    disabled; worst first."""
    since = (now - timedelta(hours=24)).replace(minute=0, second=0, microsecond=0)
    rows = (
        EndpointHour.objects.filter(hour__gte=since)
        .values("endpoint_id")
        .annotate(total=Sum("attempts"), ok=Sum("succeeded"))
    )
    counts = {row["endpoint_id"]: (row["total"], row["ok"]) for row in rows}
    shown = Endpoint.objects.filter(
        Q(pk__in=list(counts)) | Q(active=False) | Q(consecutive_failures__gt=0)
    ).order_by("active", "-consecutive_failures", "pk")[:100]
    health = [EndpointHealth(e, *counts.get(e.pk, (0, 0))) for e in shown]
    health.sort(
        key=lambda h: (h.endpoint.active, h.success_rate if h.success_rate is not None else 1.0)
    )
    return health
