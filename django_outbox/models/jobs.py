"""The job table and the worker registry.

The indexes are shaped by the queries that read them: the claim index holds queued rows
only, in the order the claim reads them, so finished rows never cost a claim anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils import timezone

from django_outbox.compat import TaskResultStatus
from django_outbox.lib.resultids import new_token, parse_result_id


class JobStatus(models.TextChoices):
    #: A workflow step whose parents have not all ended: no claim reads it.
    WAITING = "waiting", "Waiting"
    #: A job with a concurrency or sequence key whose key has no free turn: no claim reads
    #: it until the key's turn comes (django_outbox/jobs/keys.py).
    HELD = "held", "Held"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"

    @property
    def task_status(self) -> TaskResultStatus:
        """The django.tasks status users see; a cancelled job reads as FAILED."""
        return _TASK_STATUS[self]


_TASK_STATUS = {
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.HELD: TaskResultStatus.READY,
    JobStatus.QUEUED: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

#: A unique key is held while its job can still run: waiting (a workflow step), held (its
#: key's turn has not come), queued or running.
ACTIVE_STATUSES = [JobStatus.WAITING, JobStatus.HELD, JobStatus.QUEUED, JobStatus.RUNNING]
#: Active but not yet queued: a workflow's step waiting on the steps before it, a job held
#: behind its concurrency or sequence key.
PENDING_STATUSES = [JobStatus.WAITING, JobStatus.HELD]

#: The jobs that take one of their limit key's turns: queued (its turn has come) or running.
TURN_STATUSES = [JobStatus.QUEUED, JobStatus.RUNNING]

#: The order jobs are claimed in; the claim index follows it.
CLAIM_ORDER = ("-priority", "run_at", "id")


class JobQuerySet(models.QuerySet["Job"]):
    def due(self, queues: Iterable[str], now: datetime, backend: str = "default") -> JobQuerySet:
        """Queued jobs of ``queues`` (of one TASKS alias) whose time has come, in claim order."""
        return self.filter(
            status=JobStatus.QUEUED, queue__in=list(queues), run_at__lte=now, backend=backend
        ).order_by(*CLAIM_ORDER)

    def expired_leases(self, now: datetime) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING, lease_until__lt=now)

    def for_result(self, result_id: str) -> JobQuerySet:
        """The job that ``result_id`` (a ``TaskResult.id``) names: none when the id is
        malformed, or names a job that no longer exists or never committed."""
        try:
            pk, token = parse_result_id(result_id)
        except ValueError:
            return self.none()
        return self.filter(pk=pk, token=token)


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    #: Drawn at random for each row written (0 in rows stored before it existed). The
    #: result id is the primary key and this (lib/resultids.py): the id of a job whose
    #: enqueue rolled back names nothing, not the job that was given its primary key next.
    #: Not indexed: only compared once the row is found by its key. On PostgreSQL it is the
    #: table's last column (migration 0008), outside the runs a claim and a completion write.
    # db_default: rows written by code older than migration 0008 (a rolling upgrade) get 0,
    # and a bare-number result id, instead of failing.
    token = models.IntegerField(default=new_token, db_default=0, editable=False)
    backend = models.CharField(max_length=100, default="default")
    queue = models.CharField(max_length=100, default="default")
    task_path = models.CharField(max_length=255)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    priority = models.SmallIntegerField(default=0)
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    run_at = models.DateTimeField(default=timezone.now)
    #: The ``run_after`` the job was enqueued with, as its TaskResult reports it (``run_at``
    #: moves with each retry's backoff); NULL when it was to run at once.
    run_after = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="Runs started so far.")
    max_attempts = models.PositiveIntegerField(default=3)
    timeout = models.FloatField(null=True, blank=True, help_text="Seconds; empty for none.")
    backoff_base = models.FloatField(default=1.0)
    backoff_cap = models.FloatField(default=3600.0)
    lease_until = models.DateTimeField(null=True, blank=True)
    # NULL, not "", where unset: the partial indexes and constraints rely on it.
    worker_id = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    worker_ids = models.JSONField(default=list, blank=True, help_text="One per attempt.")
    dedup_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    return_value = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    enqueued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: Someone asked a running job to stop (django_outbox.cancel); its task sees it through
    #: ``context.cancelled()`` after the worker's next heartbeat.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    #: The W3C trace context of the enqueue, when OpenTelemetry traced it: each run's span
    #: joins that trace (django_outbox.telemetry).
    trace_context = models.JSONField(null=True, blank=True)
    #: The workflow this job is a step of (django_outbox.workflows), if any.
    workflow_id = models.BigIntegerField(null=True, blank=True)
    #: A step that waits for others: what it takes of their results as its first argument
    #: (``Receives``: 0 nothing, 1 one result, 2 the list). NULL for every other job, whose
    #: run then reads nothing of any other.
    receives = models.SmallIntegerField(null=True, blank=True)
    #: What the task last reported through ``context.progress()``: done, total, note.
    progress = models.JSONField(null=True, blank=True)
    #: The concurrency or sequence key this job takes its turn under (``LimitKey``):
    #: "concurrency:<key>" or "sequence:<key>"; NULL for a job without one.
    limit_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001

    objects = JobQuerySet.as_manager()

    class Meta:
        db_table = "django_outbox_job"
        indexes = [
            # The claim reads queued rows of its queues by priority, due time, then id.
            models.Index(
                "queue",
                models.F("priority").desc(),
                "run_at",
                "id",
                name="outbox_job_claim",
                condition=Q(status=JobStatus.QUEUED),
            ),
            # The dashboard's throughput and timings read recent finished rows; pruning
            # reads old ones.
            models.Index(
                fields=["finished_at"],
                name="outbox_job_finished",
                condition=Q(finished_at__isnull=False),
            ),
            # The dashboard's latest failures and failure counts.
            models.Index(
                fields=["finished_at"],
                name="outbox_job_failed",
                condition=Q(status=JobStatus.FAILED),
            ),
            # A limit key's turns: its queued and running jobs are counted, and its held
            # ones queued in enqueue order.
            models.Index(
                fields=["limit_key", "status", "id"],
                name="outbox_job_limit_key",
                condition=Q(limit_key__isnull=False),
            ),
            # The dashboard's counts of waiting steps and held jobs per queue. (MariaDB and
            # MySQL have no partial index: the claim index there, led by the status and the
            # queue, serves the count.)
            models.Index(
                fields=["queue", "status"],
                name="outbox_job_pending",
                condition=Q(status__in=PENDING_STATUSES),
            ),
            # Heartbeats and rescue read the leases of running rows only.
            models.Index(
                fields=["lease_until"],
                name="outbox_job_lease",
                condition=Q(status=JobStatus.RUNNING),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["dedup_key"],
                name="outbox_job_dedup_active",
                condition=Q(status__in=ACTIVE_STATUSES, dedup_key__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.task_path} ({self.status})"


class Worker(models.Model):
    """One running ``runworker`` process, kept current by its heartbeat."""

    id = models.CharField(max_length=100, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "django_outbox_worker"

    def __str__(self) -> str:
        return self.id


class Dashboard(Job):
    """No table of its own: gives the admin's dashboard its place and its URL
    (``/admin/django_outbox/dashboard/``) and a "view" permission to grant."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
