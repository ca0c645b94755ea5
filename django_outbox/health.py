"""Is the outbox healthy? One check for ``manage.py outbox_health`` and the health URL.

Three questions, each a bounded query:

- does every queue with due work (or every queue asked about) have a live worker, one
  that has stamped its row recently (``silent_seconds``);
- is the oldest due job younger than ``MAX_DUE_AGE_SECONDS`` (read through the claim's
  partial index on queued rows);
- is the failure rate of the latest jobs finished in the last ``WINDOW_SECONDS`` (at most
  ``SAMPLE`` of them, through the index on ``finished_at``) at most ``MAX_FAILURE_RATE``,
  once at least ``MIN_FINISHED`` jobs finished.

The first problem found is the reason; all the figures go with it either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone

from django_outbox import conf
from django_outbox.lib import text
from django_outbox.models import Job, JobStatus, Worker

#: Most finished jobs the failure rate is read from.
SAMPLE = 1000


@dataclass(frozen=True, slots=True)
class QueueHealth:
    queue: str
    #: Live workers serving the queue.
    live_workers: int
    #: Jobs due now (queued, their time come).
    due: int
    #: Seconds the oldest due job has waited past its time (None: nothing due).
    oldest_due_seconds: float | None


@dataclass(frozen=True, slots=True)
class Health:
    ok: bool
    #: One line: "ok: …" or the first problem found.
    reason: str
    checked_at: datetime
    live_workers: int
    queues: list[QueueHealth] = field(default_factory=list)
    #: The finished jobs the failure rate was read from, and how many of them failed.
    finished: int = 0
    failed: int = 0
    failure_rate: float | None = None
    #: Every problem found, the reason first.
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["checked_at"] = self.checked_at.isoformat()
        return data


def live(worker: Worker, now: datetime) -> bool:
    """A worker is live while it has not stopped and has stamped its row within
    ``silent_seconds()``."""
    silent = timedelta(seconds=silent_seconds())
    return worker.stopped_at is None and now - worker.heartbeat_at <= silent


def silent_seconds() -> float:
    """How long a live worker may go without stamping its row: a lease (a worker holding
    jobs renews it every HEARTBEAT_SECONDS), or an idle worker's longest wait between
    stamps (STALLED_CHECK_SECONDS, or POLL_INTERVAL when polling), plus a heartbeat's
    slack, so an idle worker is never judged dead on the second its stamp falls due."""
    options = conf.get()
    longest = max(options.LEASE_SECONDS, options.STALLED_CHECK_SECONDS, options.POLL_INTERVAL)
    return longest + options.HEARTBEAT_SECONDS


def check(
    queues: list[str] | None = None,
    *,
    max_due_age: float | None = None,
    max_failure_rate: float | None = None,
    window: float | None = None,
    host: str | None = None,
) -> Health:
    """The outbox's health now.

    ``queues``: queues that must have a live worker even with nothing due (default: the
    setting's ``QUEUES``; queues with due jobs are always checked). ``host``: only workers
    on this host count (a probe of one machine's workers). The other arguments override
    ``OUTBOX["HEALTH"]``."""
    options = conf.get().HEALTH
    max_due_age = options.MAX_DUE_AGE_SECONDS if max_due_age is None else max_due_age
    max_failure_rate = options.MAX_FAILURE_RATE if max_failure_rate is None else max_failure_rate
    window = options.WINDOW_SECONDS if window is None else window
    required = list(options.QUEUES if queues is None else queues)
    now = timezone.now()

    seen = Worker.objects.filter(
        stopped_at=None, heartbeat_at__gte=now - timedelta(seconds=silent_seconds())
    )
    if host is not None:
        seen = seen.filter(hostname=host)
    workers = [w for w in seen if live(w, now)]
    serving: dict[str, int] = {}
    for worker in workers:
        for queue in worker.queues:
            serving[queue] = serving.get(queue, 0) + 1

    due_rows = (
        Job.objects.filter(status=JobStatus.QUEUED, run_at__lte=now)
        .values("queue")
        .annotate(due=Count("id"), oldest=Min("run_at"))
    )
    due = {row["queue"]: (row["due"], row["oldest"]) for row in due_rows}
    lines = []
    for queue in sorted(set(required) | set(due)):
        count, oldest = due.get(queue, (0, None))
        age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
        lines.append(QueueHealth(queue, serving.get(queue, 0), count, age))

    recent = list(
        Job.objects.filter(finished_at__gte=now - timedelta(seconds=window))
        .order_by("-finished_at")
        .values_list("status", flat=True)[:SAMPLE]
    )
    failed = sum(1 for status in recent if status == JobStatus.FAILED)
    rate = failed / len(recent) if recent else None

    problems = []
    for line in lines:
        if not line.live_workers:
            waiting = f"{line.due:,} due" if line.due else "nothing due yet"
            problems.append(f"no live worker serves queue {line.queue!r} ({waiting})")
    for line in lines:
        if line.oldest_due_seconds is not None and line.oldest_due_seconds > max_due_age:
            problems.append(
                f"the oldest due job of queue {line.queue!r} has waited "
                f"{text.duration(line.oldest_due_seconds)} "
                f"(more than {text.duration(max_due_age)})"
            )
    finished = f"finished in the last {text.duration(window)}"
    if rate is not None and len(recent) >= options.MIN_FINISHED and rate > max_failure_rate:
        shown, limit = _percents_apart(rate, max_failure_rate)
        problems.append(
            f"{failed:,} of the last {text.count(len(recent), 'job')} {finished} failed "
            f"({shown}, more than {limit})"
        )
    if problems:
        reason = f"unhealthy: {problems[0]}"
        if len(problems) > 1:
            reason += f"; and {text.count(len(problems) - 1, 'more problem')}"
    else:
        due_total = sum(line.due for line in lines)
        failures = (
            f"no job {finished}"
            if rate is None
            else f"{failed:,} of {text.count(len(recent), 'job')} {finished} failed "
            f"({_percent(rate)})"
        )
        reason = (
            f"ok: {text.count(len(workers), 'live worker')}; "
            f"{text.count(due_total, 'job')} due; {failures}"
        )
    return Health(
        ok=not problems,
        reason=reason,
        checked_at=now,
        live_workers=len(workers),
        queues=lines,
        finished=len(recent),
        failed=failed,
        failure_rate=rate,
        problems=problems,
    )


def _percent(rate: float, places: int = 1) -> str:
    """``62%``, ``50.4%``: a rate as a percentage, trailing zeros dropped."""
    return f"{rate * 100:.{places}f}".rstrip("0").rstrip(".") + "%"


def _percents_apart(rate: float, limit: float) -> tuple[str, str]:
    """A rate above its limit, with as many decimals as it takes to read above it (50.04%
    is not "50% (more than 50%)"), and the limit as set."""
    limit_shown = round(limit * 100, 4)
    for places in (1, 2, 3, 4):
        if round(rate * 100, places) > limit_shown:
            break
    return _percent(rate, places), f"{text.number(limit_shown)}%"
