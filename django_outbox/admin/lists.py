"""What keeps the admin's lists fast on tables of millions of rows.

Django's defaults read a whole table on every page in three places: the paginator's
COUNT(*), a list filter on a plain field (SELECT DISTINCT over the table, for its
choices), and the date hierarchy (MIN, MAX, then DISTINCT years or months). Here the
paginator estimates an unfiltered PostgreSQL table's size from its statistics, the queue
and task filters offer the values of live and recent jobs only, and the date hierarchy
offers the calendar rather than the table's distinct dates (templatetags/outbox_admin.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import cached_property

from django_outbox.db import dialect, named
from django_outbox.models import Job, JobStatus

#: Below this estimate, the exact count is cheap enough.
EXACT_BELOW = 100_000


class EstimatedCountPaginator(Paginator):
    """COUNT(*) for filtered lists and small tables; the database's own row estimate for an
    unfiltered large table where it keeps one (``Dialect.row_estimate``; the last page
    number may then be off by a little)."""

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and not queryset.query.where:
            estimate = _estimated_rows(queryset)
            if estimate is not None and estimate >= EXACT_BELOW:
                return estimate
        return super().count


def _estimated_rows(queryset: QuerySet[Any]) -> int | None:
    estimate = dialect(queryset.db).row_estimate(queryset.model._meta.db_table)
    if estimate is None:
        return None
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(named("row-estimate", estimate[0]), estimate[1])
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None and row[0] >= 0 else None


class RecentJobValuesFilter(admin.SimpleListFilter):
    """Choices from the jobs queued or running now and those finished in the last hour
    (both read through partial indexes), not a DISTINCT over every job ever run."""

    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        since = timezone.now() - timedelta(hours=1)
        values: set[str] = set()
        for condition in (Q(status=JobStatus.QUEUED), Q(status=JobStatus.RUNNING)):
            values.update(
                Job.objects.filter(condition).values_list(self.field, flat=True).distinct()
            )
        values.update(
            Job.objects.filter(finished_at__gte=since).values_list(self.field, flat=True).distinct()
        )
        if self.value():
            values.add(str(self.value()))
        return [(value, value) for value in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(**{self.field: self.value()})
        return queryset


class QueueFilter(RecentJobValuesFilter):
    title = "queue (live and last hour)"
    parameter_name = "queue"
    field = "queue"


class TaskFilter(RecentJobValuesFilter):
    title = "task (live and last hour)"
    parameter_name = "task_path"
    field = "task_path"


class EventTypeFilter(admin.SimpleListFilter):
    """Choices from the latest messages (read backwards by primary key), not all of them."""

    title = "event type (latest messages)"
    parameter_name = "event_type"
    LATEST = 1000

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        from django_outbox.models import Message

        latest = Message.objects.order_by("-id").values_list("event_type", flat=True)
        values = set(latest[: self.LATEST])
        if self.value():
            values.add(str(self.value()))
        return [(value, value) for value in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(event_type=self.value())
        return queryset


class TenantFilter(admin.SimpleListFilter):
    """Tenants from the endpoints table (small), for lists of messages or deliveries."""

    title = "tenant"
    parameter_name = "tenant"
    #: The lookup from the listed model to the tenant.
    path = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        from django_outbox.models import Endpoint

        tenants = Endpoint.objects.values_list("tenant", flat=True).distinct()
        return [(tenant, tenant or "(none)") for tenant in sorted(set(tenants))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() is not None:
            return queryset.filter(**{self.path: self.value()})
        return queryset


class DeliveryTenantFilter(TenantFilter):
    path = "message__tenant"


class AnswerFilter(admin.SimpleListFilter):
    """Attempts by the class of their answer, a fixed list (no DISTINCT of status codes)."""

    title = "answer"
    parameter_name = "answer"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("2xx", "2xx"),
            ("3xx", "3xx (not followed)"),
            ("4xx", "4xx"),
            ("5xx", "5xx"),
            ("none", "no answer (timeout, refused…)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "none":
            return queryset.filter(status_code__isnull=True)
        if value in {"2xx", "3xx", "4xx", "5xx"}:
            low = int(value[0]) * 100
            return queryset.filter(status_code__gte=low, status_code__lt=low + 100)
        return queryset
