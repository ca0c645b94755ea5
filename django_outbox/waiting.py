"""Why a job that has not started is still waiting: what the admin shows on its page.

``reasons(job)`` looks at what holds it back, in the order a worker meets them: its
workflow, its key, its due time (a retry's backoff, a rate limit's turn), its queue (paused,
at its concurrency or rate limit), and the workers (none live serves its queue). A few
small queries, for one job at a time; nothing here decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from django_outbox import conf, health, ratelimits
from django_outbox.jobs import ratekeys
from django_outbox.models import Job, JobStatus, LimitKey, QueueState, Worker, WorkflowEdge
from django_outbox.models.jobs import TURN_STATUSES
from django_outbox.task import CONCURRENCY_PREFIX, SEQUENCE_PREFIX


@dataclass(frozen=True, slots=True)
class Reason:
    """One thing holding a job back."""

    #: A short code: upstream, key_busy, sequence_held, not_due, rate_limited,
    #: queue_paused, queue_full, queue_rate, no_worker, due; and holds_sequence for the
    #: failed job holding a sequence (``holding``).
    code: str
    text: str
    #: Until when, where that is known.
    until: datetime | None = None
    #: The jobs holding it (a busy key's, a failed job holding a sequence).
    job_ids: tuple[int, ...] = ()


#: Statuses of a job that has not started (or is queued again for a retry).
NOT_STARTED = [JobStatus.WAITING, JobStatus.HELD, JobStatus.QUEUED]


def reasons(job: Job, now: datetime | None = None) -> list[Reason]:
    """What holds ``job`` back now, most decisive first; [] for a job that is running or
    finished. A due job that nothing holds back reads as ``due``."""
    if job.status not in NOT_STARTED:
        return []
    now = now or timezone.now()
    found: list[Reason] = []
    if job.status == JobStatus.WAITING:
        found.append(_upstream(job))
    if job.status == JobStatus.HELD and job.limit_key:
        found.append(_key(job))
    if job.run_at > now:
        found.append(_not_due(job))
    found += _queue(job, now)
    if not found and job.status == JobStatus.QUEUED:
        found.append(Reason("due", "Due now: a worker takes it at its next claim."))
    return found


def holding(job: Job) -> Reason | None:
    """What a failed job holds back: its sequence, with the later jobs waiting in it, until
    it is retried or skipped; None for any other job."""
    if job.status != JobStatus.FAILED or not (job.limit_key or "").startswith(SEQUENCE_PREFIX):
        return None
    key = job.limit_key or ""
    if not LimitKey.objects.filter(key=key, held_by=job.pk).exists():
        return None
    later = Job.objects.filter(limit_key=key, status=JobStatus.HELD).order_by("id")
    ids = tuple(later.values_list("id", flat=True)[:20])
    return Reason(
        "holds_sequence",
        f"It holds its sequence {key.removeprefix(SEQUENCE_PREFIX)!r}: the later jobs of it "
        "wait until it is retried (it runs again first) or skipped (the sequence goes on "
        "without it).",
        job_ids=ids,
    )


def holder(job: Job) -> int | None:
    """The failed job holding ``job``'s sequence, if one does."""
    if not (job.limit_key or "").startswith(SEQUENCE_PREFIX):
        return None
    return LimitKey.objects.filter(key=job.limit_key).values_list("held_by", flat=True).first()


def _upstream(job: Job) -> Reason:
    parents = WorkflowEdge.objects.filter(child_id=job.pk).exclude(
        parent__status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]
    )
    ids = tuple(parents.values_list("parent_id", flat=True)[:20])
    return Reason(
        "upstream",
        f"It waits for {len(ids)} step(s) of its workflow to end.",
        job_ids=ids,
    )


def _key(job: Job) -> Reason:
    key = job.limit_key or ""
    row = LimitKey.objects.filter(key=key).first()
    if key.startswith(SEQUENCE_PREFIX):
        name = key.removeprefix(SEQUENCE_PREFIX)
        if row is not None and row.held_by is not None:
            return Reason(
                "sequence_held",
                f"Its sequence {name!r} is held by a job that failed: retry it or skip it.",
                job_ids=(row.held_by,),
            )
        what = f"Its sequence {name!r} runs one job at a time, in order"
    else:
        name = key.removeprefix(CONCURRENCY_PREFIX)
        limit = row.limit if row is not None else 1
        what = f"Its concurrency key {name!r} has its limit of {limit} queued or running"
    ahead = Job.objects.filter(limit_key=key, status__in=TURN_STATUSES).order_by("id")
    ids = tuple(ahead.values_list("id", flat=True)[:20])
    return Reason("key_busy", f"{what}: it takes its turn once one of these ends.", job_ids=ids)


def _not_due(job: Job) -> Reason:
    turn = job.kwargs.get(ratekeys.TURN) if isinstance(job.kwargs, dict) else None
    if isinstance(turn, dict) and turn.get("attempt") == job.attempts + 1:
        return Reason(
            "rate_limited",
            "Its rate key is at its limit: it runs at the turn it reserved.",
            until=job.run_at,
        )
    if job.attempts and job.errors:
        return Reason(
            "not_due",
            f"Attempt {job.attempts} failed: it is retried after its backoff.",
            until=job.run_at,
        )
    return Reason("not_due", "Not due yet.", until=job.run_at)


def _queue(job: Job, now: datetime) -> list[Reason]:
    found = []
    paused = QueueState.objects.filter(name=job.queue, paused_at__isnull=False).first()
    if paused is not None:
        found.append(Reason("queue_paused", f"Its queue {job.queue!r} is paused."))
    settings = conf.get()
    most = settings.concurrency_limits([job.queue]).get(job.queue)
    if most is not None:
        running = Job.objects.filter(queue=job.queue, status=JobStatus.RUNNING).count()
        if running >= most:
            found.append(
                Reason(
                    "queue_full",
                    f"Its queue {job.queue!r} runs at most {most} job(s) at once, and "
                    f"{running} are running.",
                )
            )
    rate = settings.rate_limits([job.queue]).get(job.queue)
    if rate is not None:
        at = ratelimits.next_token_at(f"queue:{job.queue}", rate)
        if at is not None:
            found.append(
                Reason(
                    "queue_rate",
                    f"Its queue {job.queue!r} is at its rate limit.",
                    until=datetime.fromtimestamp(at, tz=UTC),
                )
            )
    if not _served(job, now):
        found.append(
            Reason(
                "no_worker",
                f"No live worker serves its queue {job.queue!r}: start one "
                f"(manage.py runworker --queues {job.queue}).",
            )
        )
    return found


def _served(job: Job, now: datetime) -> bool:
    recent = now - timedelta(seconds=health.silent_seconds())
    workers = Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=recent)
    return any(job.queue in (worker.queues or []) for worker in workers)
