"""The admin for workflows: each one's status and steps, with cancel and retry actions."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_outbox import workflows
from django_outbox.admin import display
from django_outbox.admin.jobs import ReadOnlyAdmin
from django_outbox.models import Workflow, WorkflowStatus


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    list_display = ["id", "shown_name", "coloured_status", "steps_done", "created", "finished"]
    list_filter = ["status", "created_at"]
    search_fields = ["=id", "name"]
    ordering = ["-id"]
    actions = ["retry_workflows", "cancel_workflows"]
    readonly_fields = ["coloured_status", "steps_done", "steps_table", "shown_result"]
    fields = [
        "name",
        "coloured_status",
        "steps_done",
        "created_at",
        "finished_at",
        "shown_result",
        "steps_table",
    ]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A workflow goes whole, with its steps' jobs, by retention (outbox_prune): deleting
        its row alone would leave its waiting steps waiting for ever."""
        return False

    @admin.display(description="name", ordering="name")
    def shown_name(self, workflow: Workflow) -> SafeString | str:
        return display.cut(workflow.name or display.NOTHING, 16)

    @admin.display(description="status", ordering="status")
    def coloured_status(self, workflow: Workflow) -> SafeString:
        running = workflow.status == WorkflowStatus.FAILED and workflow.finished_at is None
        title = "a step failed; others are still running" if running else ""
        return display.status_badge(workflow.status, title=title)

    @admin.display(description="steps ended")
    def steps_done(self, workflow: Workflow) -> str:
        return f"{workflow.steps_total - workflow.steps_left:,} of {workflow.steps_total:,}"

    @admin.display(description="created", ordering="created_at")
    def created(self, workflow: Workflow) -> SafeString | str:
        return display.ago(workflow.created_at, "created")

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, workflow: Workflow) -> SafeString | str:
        if workflow.finished_at is None:
            return display.NOTHING
        return display.ago(workflow.finished_at, "finished")

    @admin.display(description="result")
    def shown_result(self, workflow: Workflow) -> SafeString | str:
        if workflow.status != WorkflowStatus.SUCCEEDED:
            return display.NOTHING
        return display.pretty_json(workflows.get(workflow.pk).result)

    @admin.display(description="steps")
    def steps_table(self, workflow: Workflow) -> SafeString:
        """Every step: its task (a link to its job), status, what it waits for, progress,
        and its result or last error."""
        run = workflows.get(workflow.pk)
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td><a href='{}'>{}</a></td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td></tr>",
            (
                (
                    step.position,
                    reverse("admin:django_outbox_job_change", args=[step.job_id]),
                    step.task_path.rsplit(".", 1)[-1],
                    display.status_badge(
                        "failed" if step.status == workflows.UPSTREAM_FAILED else step.status,
                        "upstream failed" if step.status == workflows.UPSTREAM_FAILED else None,
                    ),
                    ", ".join(map(str, step.waits_for)) + (" (always)" if step.always else ""),
                    str(step.progress) if step.progress else "",
                    display.cut(step.error or _short(step.result), 30),
                )
                for step in run.steps
            ),
        )
        return format_html(
            "<table class='outbox-steps'><thead><tr><th>#</th><th>task</th><th>status</th>"
            "<th>waits for</th><th>progress</th><th>result or error</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows,
        )

    @admin.action(
        description="Retry (failed or cancelled: their unsuccessful steps and those below)",
        permissions=["act"],
    )
    def retry_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        again, refused = 0, []
        for pk in queryset.values_list("pk", flat=True):
            try:
                again += workflows.retry(pk)
            except workflows.WorkflowNotRetryable as exc:
                refused.append(str(exc))
        if again:
            self.message_user(request, f"Steps to run again: {again:,}.", messages.SUCCESS)
        for reason in refused:
            self.message_user(request, reason, messages.WARNING)

    @admin.action(description="Cancel (running steps are asked to stop)", permissions=["act"])
    def cancel_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        ended = [workflows.cancel(pk) for pk in queryset.values_list("pk", flat=True)]
        cancelled = sum(1 for status in ended if status == WorkflowStatus.CANCELLED)
        level = messages.SUCCESS if cancelled else messages.WARNING
        self.message_user(request, f"Workflows cancelled: {cancelled:,}.", level)


def _short(value: Any) -> str:
    return "" if value is None else json.dumps(value)[:500]
