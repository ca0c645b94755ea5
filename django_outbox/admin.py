"""A first admin for jobs and workers: lists to watch, read-only.

Actions, the dashboard and the rest of the admin come with the admin issue (#5).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from django_outbox.models import Job, Worker


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ["id", "task_path", "queue", "status", "attempts", "priority", "run_at"]
    list_filter = ["status", "queue", "task_path"]
    search_fields = ["task_path", "=id"]
    ordering = ["-id"]
    show_full_result_count = False


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ["id", "hostname", "pid", "concurrency", "heartbeat_at", "stopped_at"]
    ordering = ["-started_at"]
