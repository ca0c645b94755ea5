"""The admin for jobs, workers and schedules: lists to watch, and retry / cancel / skip /
delete actions.

One module over 400 lines: the job page's buttons and their views sit beside the list's
actions they repeat for one job (the same operations, permissions and messages); what the
page says of a job's reasons is in ``reasons``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_outbox import conf, schedules, waiting
from django_outbox.admin import display, lists, overview, reasons
from django_outbox.jobs import keys, operations
from django_outbox.jobs.progress import Progress
from django_outbox.lib.resultids import parse_result_id, result_id
from django_outbox.models import Job, JobStatus, ScheduleState, Worker
from django_outbox.models.jobs import TURN_STATUSES
from django_outbox.task import SEQUENCE_PREFIX
from django_outbox.webhooks.fanout import DELIVER_TASK

#: The job page's sections that only some jobs have.
WHY_WAITING = "Why is it waiting?"
HOLDS_SEQUENCE = "What it holds back"


def attempts_allowed(job: Job) -> int:
    """The attempts ``job`` has: a webhook delivery's are its retry schedule's (the job's
    own limit, higher, only stops a delivery whose worker keeps being lost)."""
    if job.task_path == DELIVER_TASK:
        return len(conf.get().WEBHOOKS.RETRY_SCHEDULE)
    return job.max_attempts


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows are written by the engine, never edited by hand: actions change them."""

    show_full_result_count = False  # no second COUNT(*) of a large table on every page
    show_facets = admin.ShowFacets.NEVER  # a COUNT per filter choice, on demand: too dear
    paginator = lists.EstimatedCountPaginator
    # Its date hierarchy offers the calendar, not the table's DISTINCT dates: see
    # templatetags/outbox_admin.py.
    change_list_template = "admin/django_outbox/change_list.html"

    class Media:
        # Statuses, cut cells, payloads: styled by classes, not by style attributes, so
        # that a Content-Security-Policy without 'unsafe-inline' serves every page.
        css = {"all": ("django_outbox/admin.css",)}

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_act_permission(self, request: HttpRequest) -> bool:
        """What the actions check: the model's real change permission."""
        meta = self.model._meta
        return request.user.has_perm(f"{meta.app_label}.change_{meta.model_name}")


def report(admin_: admin.ModelAdmin, request: HttpRequest, what: str, changed: Any) -> None:
    """One message per action: how many rows it changed, and how many it left alone."""
    text = f"{what}: {changed.done:,}."
    if changed.skipped:
        they, them = ("it was", "it") if changed.skipped == 1 else ("they were", "them")
        text += f" {changed.skipped:,} left as {they} (the action does not apply to {them})."
    level = messages.SUCCESS if changed.done else messages.WARNING
    admin_.message_user(request, text, level)


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    # What a laptop shows at a glance, on one line per job; the rest is on the job's page.
    # Not the queue (its filter is on the right): at 1400 px the error needs the room.
    list_display = ["id", "task", "coloured_status", "attempts_used", "when", "last_error"]
    list_filter = ["status", lists.QueueFilter, lists.TaskFilter, "finished_at"]
    date_hierarchy = "enqueued_at"
    search_fields = ["=id", "task_path", "=dedup_key"]
    ordering = ["-id"]
    actions = ["retry_now", "cancel", "skip", "delete_selected"]
    # The buttons (Close, Delete, Retry now) above a long traceback too.
    save_on_top = True
    readonly_fields = [
        "shown_result_id",
        "pretty_args",
        "pretty_kwargs",
        "pretty_return_value",
        "error_history",
        "shown_progress",
        "shown_max_attempts",
        "unique_key",
        "workflow",
        "why_waiting",
        "holds_sequence",
    ]
    fieldsets = [
        (WHY_WAITING, {"fields": ["why_waiting"]}),
        (HOLDS_SEQUENCE, {"fields": ["holds_sequence"]}),
        (
            None,
            {
                "fields": [
                    "shown_result_id",
                    "task_path",
                    "backend",
                    "queue",
                    "status",
                    "priority",
                    "unique_key",
                    "limit_key",
                    "workflow",
                ]
            },
        ),
        (
            "Arguments and result",
            {"fields": ["pretty_args", "pretty_kwargs", "pretty_return_value"]},
        ),
        (
            "Runs",
            {
                "fields": [
                    "attempts",
                    "shown_max_attempts",
                    "timeout",
                    "run_at",
                    "enqueued_at",
                    "started_at",
                    "last_attempted_at",
                    "finished_at",
                    "worker_id",
                    "lease_until",
                    "worker_ids",
                    "shown_progress",
                    "error_history",
                ]
            },
        ),
    ]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """A result id (``TaskResult.id``, as an app logs it) finds its job; anything else
        is searched as usual (a bare number is a primary key)."""
        try:
            pk, token = parse_result_id(search_term.strip())
        except ValueError:
            token = 0
        if token:
            return queryset.filter(pk=pk, token=token), False
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description="result id")
    def shown_result_id(self, job: Job) -> str:
        return result_id(job.pk, job.token)

    @admin.display(description="status", ordering="status")
    def coloured_status(self, job: Job) -> SafeString:
        return display.status_badge(job.status)

    @admin.display(description="task", ordering="task_path")
    def task(self, job: Job) -> SafeString | str:
        """The task's name; its whole path in the title."""
        return display.cut(job.task_path, 12, shown=job.task_path.rsplit(".", 1)[-1])

    @admin.display(description="workflow")
    def workflow(self, job: Job) -> SafeString | str:
        if job.workflow_id is None:
            return display.NOTHING
        url = reverse("admin:django_outbox_workflow_change", args=[job.workflow_id])
        return format_html('<a href="{}">workflow #{}</a>', url, job.workflow_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        """Deleting queued or running jobs with keys gives their turns to the next."""
        limit_keys = {
            key
            for key in queryset.filter(status__in=TURN_STATUSES).values_list("limit_key", flat=True)
            if key is not None
        }
        super().delete_queryset(request, queryset)
        keys.admit(queryset.db, limit_keys, timezone.now())

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        self.delete_queryset(request, Job.objects.filter(pk=obj.pk))

    @admin.display(description="reasons")
    def why_waiting(self, job: Job) -> SafeString | str:
        """What holds a job that has not started back (django_outbox/waiting.py)."""
        return reasons.reasons_list(waiting.reasons(job))

    @admin.display(description="held back")
    def holds_sequence(self, job: Job) -> SafeString | str:
        """What a failed job holds back: its sequence (django_outbox/waiting.py)."""
        found = waiting.holding(job)
        return reasons.reasons_list([found] if found is not None else [])

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The reasons it waits only on a job that has not started; what it holds back
        only on a failed job holding its sequence."""
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or obj.status not in waiting.NOT_STARTED:
            fieldsets = [fieldset for fieldset in fieldsets if fieldset[0] != WHY_WAITING]
        if obj is None or waiting.holding(obj) is None:
            fieldsets = [fieldset for fieldset in fieldsets if fieldset[0] != HOLDS_SEQUENCE]
        return fieldsets

    @admin.display(description="progress")
    def shown_progress(self, job: Job) -> str:
        progress = Progress.from_stored(job.progress)
        return str(progress) if progress else display.NOTHING

    @admin.display(description="attempts")
    def attempts_used(self, job: Job) -> SafeString:
        allowed = attempts_allowed(job)
        return format_html(
            '<span title="{} of {} attempts used">{}/{}</span>',
            job.attempts,
            allowed,
            job.attempts,
            allowed,
        )

    @admin.display(description="unique key")
    def unique_key(self, job: Job) -> str:
        """``dedup_key`` in the table: what ``task.using(unique_key=…)`` set."""
        return job.dedup_key or display.NOTHING

    @admin.display(description="max attempts")
    def shown_max_attempts(self, job: Job) -> str:
        allowed = attempts_allowed(job)
        if allowed == job.max_attempts:
            return str(allowed)
        return (
            f"{allowed}, as the webhook retry schedule says (OUTBOX['WEBHOOKS']"
            f"['RETRY_SCHEDULE']); the job itself may run up to {job.max_attempts} times, so "
            "that a delivery whose worker was lost mid-attempt still gets its attempts"
        )

    @admin.display(description="when")
    def when(self, job: Job) -> SafeString | str:
        """Queued: when it is due; running: for how long; finished: how long ago."""
        now = timezone.now()
        if job.status == JobStatus.QUEUED:
            if job.run_at > now:
                return display.dated(f"in {display.duration(job.run_at - now)}", job.run_at, "due")
            return display.dated(f"waiting {display.age(job.run_at, now)}", job.run_at, "due")
        if job.status == JobStatus.WAITING:
            return display.dated("after its upstream", job.enqueued_at, "enqueued")
        if job.status == JobStatus.HELD:
            return display.dated("its key's turn", job.enqueued_at, "enqueued")
        if job.status == JobStatus.RUNNING:
            started = job.last_attempted_at or job.started_at
            progress = Progress.from_stored(job.progress)
            so_far = f" · {progress.amount}" if progress else ""
            return display.dated(f"running {display.age(started, now)}{so_far}", started, "started")
        if job.finished_at is not None:
            return display.ago(job.finished_at, "finished")
        return display.ago(job.enqueued_at, "enqueued")

    @admin.display(description="last error")
    def last_error(self, job: Job) -> SafeString | str:
        line = display.last_error_line(job.errors, limit=1000)
        return display.cut(line, shown=display.without_module(line))

    @admin.display(description="args")
    def pretty_args(self, job: Job) -> SafeString:
        return display.pretty_json(job.args)

    @admin.display(description="kwargs")
    def pretty_kwargs(self, job: Job) -> SafeString:
        return display.pretty_json(job.kwargs)

    @admin.display(description="return value")
    def pretty_return_value(self, job: Job) -> SafeString:
        return display.pretty_json(job.return_value)

    @admin.display(description="errors, one per failed run")
    def error_history(self, job: Job) -> SafeString:
        if not job.errors:
            return format_html("{}", "none")
        return format_html_join(
            "",
            "<p><b>{}</b></p>{}",
            (
                (
                    f"Run {number}: {error.get('exception_class_path', '')}",
                    display.preformatted(str(error.get("traceback", ""))),
                )
                for number, error in enumerate(job.errors, start=1)
            ),
        )

    def get_urls(self) -> list[Any]:
        info = self.opts.app_label, self.opts.model_name
        retry = path(
            "<path:object_id>/retry/",
            self.admin_site.admin_view(self.retry_view),
            name="{}_{}_retry".format(*info),
        )
        skip = path(
            "<path:object_id>/skip/",
            self.admin_site.admin_view(self.skip_view),
            name="{}_{}_skip".format(*info),
        )
        # Before the admin's own: its "<path:object_id>/" would take these URLs too.
        return [retry, skip, *super().get_urls()]

    def retry_offered(self, request: HttpRequest, job: Job) -> bool:
        """The page's "Retry now" button: for a failed or cancelled job, or one queued for
        later, to a user whom the actions allow to change jobs."""
        later = job.status == JobStatus.QUEUED and job.run_at > timezone.now()
        return self.has_act_permission(request) and (
            job.status in (JobStatus.FAILED, JobStatus.CANCELLED) or later
        )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Job | None = None,
    ) -> HttpResponse:
        if obj is not None and self.retry_offered(request, obj):
            context["retry_url"] = reverse(
                f"{self.admin_site.name}:django_outbox_job_retry", args=[quote(obj.pk)]
            )
            context["retry_label"] = "Run now" if obj.status == JobStatus.QUEUED else "Retry now"
        if obj is not None and self.has_act_permission(request) and reasons.sequence_holder(obj):
            context["skip_url"] = reverse(
                f"{self.admin_site.name}:django_outbox_job_skip", args=[quote(obj.pk)]
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _button_job(self, request: HttpRequest, object_id: str) -> Job:
        """The job a button of its page posts about, for a user the actions allow to change
        jobs (the admin's views check the page's CSRF token)."""
        if not self.has_act_permission(request):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404(f"No job with the id {object_id!r}.")
        return job

    def _back_to(self, job: Job) -> HttpResponse:
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:django_outbox_job_change", args=[quote(job.pk)])
        )

    def skip_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Skip" button, on a failed job holding its sequence and on a job its
        sequence holds back: the sequence goes on without the failed job (the "Skip"
        action, for that one job)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        job = self._button_job(request, object_id)
        held_by = reasons.sequence_holder(job)
        if held_by is not None and operations.skip(Job.objects.filter(pk=held_by)).done:
            sequence = (job.limit_key or "").removeprefix(SEQUENCE_PREFIX)
            self.message_user(
                request,
                f"The sequence {sequence!r} goes on without job #{held_by}.",
                messages.SUCCESS,
            )
        else:
            self.message_user(
                request,
                f"Job #{job.pk} was left as it was: no failed job holds its sequence now.",
                messages.WARNING,
            )
        return self._back_to(job)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The button on a job's page: POST only (the admin's views check its CSRF
        token), the permission the "Retry now" action asks for, the same operation."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        job = self._button_job(request, object_id)
        changed = operations.retry_now(Job.objects.filter(pk=job.pk))
        job.refresh_from_db()
        if changed.done:
            self.message_user(
                request,
                f"Job #{job.pk} is queued to run now (attempt {job.attempts + 1} of "
                f"{attempts_allowed(job)}).",
                messages.SUCCESS,
            )
        elif job.status in operations.RETRYABLE:
            self.message_user(
                request,
                f"Job #{job.pk} was left as it was: another job that is queued or running "
                f"holds its unique key ({job.dedup_key}).",
                messages.WARNING,
            )
        else:
            self.message_user(
                request,
                f"Job #{job.pk} was left as it was: it is {job.status} now.",
                messages.WARNING,
            )
        return self._back_to(job)

    @admin.action(description="Retry now (queued, failed or cancelled jobs)", permissions=["act"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        report(self, request, "Jobs queued to run now", operations.retry_now(queryset))

    @admin.action(
        description="Skip (a failed job's sequence goes on without it)", permissions=["act"]
    )
    def skip(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        report(self, request, "Sequences let go on", operations.skip(queryset))

    @admin.action(description="Cancel (running jobs are asked to stop)", permissions=["act"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        outcome = operations.cancel(queryset)
        text = f"Jobs cancelled: {outcome.cancelled:,}."
        if outcome.requested:
            text += f" Running jobs asked to stop: {outcome.requested:,}."
        if outcome.skipped:
            they = "it was" if outcome.skipped == 1 else "they were"
            text += f" {outcome.skipped:,} left as {they} (finished, or already asked to stop)."
        done = outcome.cancelled or outcome.requested
        self.message_user(request, text, messages.SUCCESS if done else messages.WARNING)


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ["host", "pid", "queue_names", "threads", "heartbeat", "state", "started"]
    list_filter = ["hostname", "stopped_at"]
    search_fields = ["id", "hostname"]
    ordering = ["-started_at"]
    actions: list[str] = []

    @admin.display(description="host", ordering="hostname")
    def host(self, worker: Worker) -> SafeString | str:
        return display.cut(worker.hostname, 13)

    @admin.display(description="queues")
    def queue_names(self, worker: Worker) -> SafeString | str:
        return display.cut(", ".join(worker.queues))

    @admin.display(description="threads", ordering="concurrency")
    def threads(self, worker: Worker) -> int:
        return worker.concurrency

    @admin.display(description="heartbeat", ordering="heartbeat_at")
    def heartbeat(self, worker: Worker) -> SafeString | str:
        return display.ago(worker.heartbeat_at, "last heartbeat")

    @admin.display(description="started", ordering="started_at")
    def started(self, worker: Worker) -> SafeString | str:
        return display.ago(worker.started_at, "started")

    @admin.display(description="state")
    def state(self, worker: Worker) -> SafeString:
        if worker.stopped_at is not None:
            return display.status_badge("cancelled", "stopped")
        if overview.is_alive(worker, timezone.now()):
            return display.status_badge("succeeded", "alive")
        return display.status_badge("failed", "silent")


@admin.register(ScheduleState)
class ScheduleAdmin(ReadOnlyAdmin):
    """The cron schedules of ``OUTBOX["SCHEDULES"]`` as the workers last saw them."""

    list_display = ["schedule", "task", "cron", "last", "next_tick"]
    ordering = ["name"]
    actions: list[str] = []

    def _schedule(self, state: ScheduleState) -> Any:
        return {s.name: s for s in schedules.schedules()}.get(state.name)

    @admin.display(description="name", ordering="name")
    def schedule(self, state: ScheduleState) -> SafeString | str:
        return display.cut(state.name, 16)

    @admin.display(description="task")
    def task(self, state: ScheduleState) -> SafeString | str:
        schedule = self._schedule(state)
        return display.cut(schedule.task if schedule else "(no longer in OUTBOX['SCHEDULES'])")

    @admin.display(description="last tick enqueued", ordering="last_tick")
    def last(self, state: ScheduleState) -> SafeString | str:
        return display.ago(state.last_tick, "last tick")

    @admin.display(description="cron")
    def cron(self, state: ScheduleState) -> str:
        schedule = self._schedule(state)
        return f"{schedule.cron} ({schedule.timezone})" if schedule else ""

    @admin.display(description="next tick")
    def next_tick(self, state: ScheduleState) -> str:
        schedule = self._schedule(state)
        if schedule is None:
            return display.NOTHING
        tick = schedule.next_tick(max(state.last_tick, timezone.now()))
        return (
            f"{timezone.localtime(tick):%Y-%m-%d %H:%M:%S} (in {display.age(timezone.now(), tick)})"
        )
