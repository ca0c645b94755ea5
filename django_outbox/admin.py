"""A first admin for jobs, workers and webhooks: lists to watch, read-only.

Actions, the dashboard and the rest of the admin come with the admin issue (#5).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from django_outbox.models import Attempt, Delivery, Endpoint, Job, Message, Worker


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


@admin.register(Endpoint)
class EndpointAdmin(ReadOnlyAdmin):
    list_display = ["id", "url", "tenant", "active", "disabled_reason", "consecutive_failures"]
    list_filter = ["active", "tenant"]
    search_fields = ["url", "tenant", "description"]
    exclude = ["secret", "previous_secret"]  # secrets are shown once, at creation
    ordering = ["-id"]


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "uid", "event_type", "tenant", "created_at"]
    list_filter = ["event_type"]
    search_fields = ["uid", "event_type", "idempotency_key", "tenant"]
    ordering = ["-id"]
    show_full_result_count = False


class AttemptInline(admin.TabularInline):
    model = Attempt
    fields = ("number", "started_at", "duration", "status_code", "error_class", "error_message")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["number"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "message", "endpoint", "status", "attempts", "next_attempt_at"]
    list_filter = ["status"]
    list_select_related = ["message", "endpoint"]
    search_fields = ["message__uid", "endpoint__url"]
    inlines = [AttemptInline]
    ordering = ["-id"]
    show_full_result_count = False


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["id", "delivery", "number", "started_at", "status_code", "error_class"]
    list_filter = ["succeeded", "status_code"]
    list_select_related = ["delivery"]
    ordering = ["-id"]
    show_full_result_count = False
