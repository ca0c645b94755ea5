"""The admin for queues someone paused or resumed: a list with Pause and Resume actions.

A queue gets its row the first time it is paused (from here, the dashboard's button,
``manage.py outbox_queue`` or ``django_outbox.queues``); a queue without one runs. The
actions, like the dashboard's button, ask for the change permission on queues.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from django_outbox import queues
from django_outbox.admin import display
from django_outbox.admin.jobs import ReadOnlyAdmin
from django_outbox.lib.text import count
from django_outbox.models import QueueState


def paused_badge(paused_at: object) -> SafeString:
    """ "paused" (amber) or "running" (green): a queue's state as the lists show it."""
    if paused_at is None:
        return display.status_badge("succeeded", "running")
    return display.status_badge("running", "paused")


def change_each(names: list[str], change: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """``change`` each queue: the ones it changed, and the ones it left as they were."""
    changed: list[str] = []
    left: list[str] = []
    for name in names:
        (changed if change(name) else left).append(name)
    return changed, left


def said(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("paused", "paused"), ("running", "running")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[QueueState]
    ) -> QuerySet[QueueState]:
        if self.value() == "paused":
            return queryset.filter(paused_at__isnull=False)
        if self.value() == "running":
            return queryset.filter(paused_at__isnull=True)
        return queryset


@admin.register(QueueState)
class QueueStateAdmin(ReadOnlyAdmin):
    list_display = ["queue", "state", "paused_since"]
    list_filter = [StateFilter]
    search_fields = ["name"]
    ordering = ["name"]
    actions = ["pause", "resume"]

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # deleting a row would resume its queue without a wake-up: resume it

    @admin.display(description="queue", ordering="name")
    def queue(self, state: QueueState) -> SafeString | str:
        return display.cut(state.name, 30)

    @admin.display(description="state", ordering="paused_at")
    def state(self, state: QueueState) -> SafeString:
        return paused_badge(state.paused_at)

    @admin.display(description="paused since", ordering="paused_at")
    def paused_since(self, state: QueueState) -> SafeString | str:
        return display.ago(state.paused_at, "paused")

    @admin.action(description="Pause selected queues", permissions=["act"])
    def pause(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        changed, left = change_each(list(queryset.values_list("name", flat=True)), queues.pause)
        self._report(request, "Paused", changed, left, "already paused")

    @admin.action(description="Resume selected queues", permissions=["act"])
    def resume(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        changed, left = change_each(list(queryset.values_list("name", flat=True)), queues.resume)
        self._report(request, "Resumed", changed, left, "not paused")

    def _report(
        self, request: HttpRequest, done: str, changed: list[str], left: list[str], why: str
    ) -> None:
        text = f"{done} {count(len(changed), 'queue')}"
        text += f": {said(changed)}." if changed else "."
        if left:
            text += f" {said(left)} left as {'it was' if len(left) == 1 else 'they were'} ({why})."
        self.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)
