"""The dashboard page, at ``/admin/django_outbox/dashboard/`` inside the admin site.

It is the change list of a proxy model (``Dashboard``), so the admin lists it in the
app's section and on the index, puts it under its own URLs and login, and gives it a
permission to grant ("Can view dashboard"; superusers and users who may view jobs see it
too). The page fetches its own ``?partial=1`` every 5 seconds and swaps the numbers in.

Each queue's line has a Pause or Resume button for users who may change queues (the
permission the queue list's actions ask for): a POST with the page's CSRF token to
``dashboard/queue/``, which calls ``django_outbox.queues`` and comes back to the page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_outbox import queues
from django_outbox.admin import display, overview
from django_outbox.admin.queues import paused_badge
from django_outbox.lib.text import count, number
from django_outbox.models import Dashboard, QueueState

CHART_WIDTH, CHART_HEIGHT, BAR = 600, 120, 10


def chart(minutes: list[overview.Minute]) -> SafeString:
    """Jobs finished per minute, succeeded (green) stacked under failed (red), as SVG."""
    peak = max([m.succeeded + m.failed for m in minutes] + [1])
    scale = (CHART_HEIGHT - 14) / peak
    bars = []
    for index, minute in enumerate(minutes):
        x = index * BAR
        ok, bad = minute.succeeded * scale, minute.failed * scale
        title = f"{minute.at:%H:%M}: {minute.succeeded:,} succeeded, {minute.failed:,} failed"
        bars.append((x, CHART_HEIGHT - ok, ok, "#1b7f3b", title))
        bars.append((x, CHART_HEIGHT - ok - bad, bad, "#b42318", title))
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        (
            (x, f"{y:.1f}", BAR - 2, f"{height:.1f}", colour, title)
            for x, y, height, colour, title in bars
            if height > 0
        ),
    )
    return format_html(
        '<svg class="outbox-chart" role="img" aria-label="jobs finished per minute" '
        'width="{}" height="{}" viewBox="0 0 {} {}" data-peak="{}" '
        'data-total="{}">'
        '<text x="0" y="10" font-size="10" fill="currentColor">{} / min</text>{}</svg>',
        CHART_WIDTH,
        CHART_HEIGHT,
        CHART_WIDTH,
        CHART_HEIGHT,
        peak,
        sum(m.succeeded + m.failed for m in minutes),
        number(peak),
        rects,
    )


def success_rate(succeeded: int, attempts: int) -> str:
    """``99.9%``: floored to a tenth, so 999 of 1,000 never reads as 100%; a dash for none."""
    if not attempts:
        return "\N{EN DASH}"
    return f"{number(succeeded * 1000 // attempts / 10)}%"


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return (
            user.is_active
            and user.is_staff
            and (
                user.has_perm("django_outbox.view_dashboard")
                or user.has_perm("django_outbox.view_job")
            )
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_pause_permission(self, request: HttpRequest) -> bool:
        """Who may pause and resume queues: those the queue list's actions allow."""
        meta = QueueState._meta
        return self.has_view_permission(request) and request.user.has_perm(
            f"{meta.app_label}.change_{meta.model_name}"
        )

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self.changelist_view)
        queue = self.admin_site.admin_view(self.queue_view)
        info = self.opts.app_label, self.opts.model_name
        return [
            path("", view, name=f"{info[0]}_{info[1]}_changelist"),
            path("queue/", queue, name=f"{info[0]}_{info[1]}_queue"),
        ]

    def queue_view(self, request: HttpRequest) -> HttpResponse:
        """A queue's Pause or Resume button: POST only (the admin's views check its CSRF
        token), the permission the queue list's actions ask for, then back to the page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_pause_permission(request):
            raise PermissionDenied
        name, do = request.POST.get("queue", ""), request.POST.get("do")
        try:
            queues.check_name(name)
        except ValueError as exc:
            return HttpResponseBadRequest(str(exc))
        if do == "pause":
            if queues.pause(name):
                text = (
                    f"Paused queue {name!r}: workers claim none of its jobs from within a "
                    "second; jobs running now finish. Jobs can still be enqueued into it."
                )
                self.message_user(request, text, messages.SUCCESS)
            else:
                self.message_user(request, f"Queue {name!r} was paused already.", messages.INFO)
        elif do == "resume":
            if queues.resume(name):
                self.message_user(
                    request, f"Resumed queue {name!r}: its due jobs run now.", messages.SUCCESS
                )
            else:
                self.message_user(request, f"Queue {name!r} was not paused.", messages.INFO)
        else:
            return HttpResponseBadRequest("do: pause or resume.")
        info = self.opts.app_label, self.opts.model_name
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:{info[0]}_{info[1]}_changelist")
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = overview.overview()
        context = {
            **self.admin_site.each_context(request),
            "title": "Outbox dashboard",
            "opts": self.opts,
            "data": data,
            "chart": chart(data.minutes),
            "queues": [
                (
                    line,
                    display.cut(line.queue, 20),
                    display.age(line.oldest_due, data.now),
                    {
                        name: number(getattr(line, name))
                        for name in (
                            "queued",
                            "scheduled",
                            "running",
                            "waiting",
                            "held",
                            "failed_24h",
                        )
                    },
                    paused_badge(line.paused_at) if line.paused_at else "running",
                    display.dated(
                        f"for {display.age(line.paused_at, data.now)}", line.paused_at, "paused"
                    )
                    if line.paused_at
                    else "",
                )
                for line in data.queues
            ],
            "paused": sum(1 for line in data.queues if line.paused_at),
            "may_pause": self.has_pause_permission(request),
            "times": {
                name: display.duration(getattr(data.times, name))
                for name in ("wait_p50", "wait_p95", "run_p50", "run_p95")
            },
            "times_from": count(data.times.jobs if data.times else 0, "job"),
            "workers": [
                (
                    w,
                    display.cut(w.hostname, 20),
                    display.cut(", ".join(w.queues)),
                    display.age(w.heartbeat_at, data.now),
                    overview.is_alive(w, data.now),
                )
                for w in data.workers
            ],
            "endpoints": [
                (
                    h,
                    display.cut(h.endpoint.url),
                    display.cut(h.endpoint.tenant, 10),
                    display.cut(f"disabled: {h.endpoint.disabled_reason}", 16),
                    {
                        "attempts": number(h.attempts_24h),
                        "success_rate": success_rate(h.succeeded_24h, h.attempts_24h),
                        "failures": number(h.endpoint.consecutive_failures),
                    },
                )
                for h in data.endpoints
            ],
            "failures": [
                (
                    job,
                    display.cut(job.task_path, 18),
                    display.cut(job.queue, 8),
                    display.cut(display.last_error_line(job.errors, limit=1000)),
                    display.age(job.finished_at, data.now),
                )
                for job in data.failures
            ],
        }
        template = (
            "admin/django_outbox/dashboard_partial.html"
            if request.GET.get("partial")
            else "admin/django_outbox/dashboard.html"
        )
        return TemplateResponse(request, template, context)
