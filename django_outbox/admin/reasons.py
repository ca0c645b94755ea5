"""What a job's admin page says of it: why it waits, and what a failed job holds back
(the reasons themselves come from django_outbox/waiting.py)."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_outbox import waiting
from django_outbox.admin import display
from django_outbox.models import Job, JobStatus


def sequence_holder(job: Job) -> int | None:
    """The failed job whose skip lets ``job``'s sequence go on: ``job`` itself when it is
    the one holding it, else the one holding the sequence ``job`` waits in."""
    if job.status == JobStatus.FAILED:
        return job.pk if waiting.holding(job) is not None else None
    if job.status == JobStatus.HELD:
        return waiting.holder(job)
    return None


def reasons_list(found: list[waiting.Reason]) -> SafeString | str:
    """Reasons as a list, each with until when and the jobs it names, linked."""
    if not found:
        return display.NOTHING
    items = []
    for reason in found:
        until = ""
        if reason.until is not None:
            left = max(reason.until - timezone.now(), timedelta(0))
            # Formatted before format_html, which escapes each argument to a SafeString
            # first: a format spec of a datetime would then fail.
            until = format_html(
                " Until {} (in {}).",
                timezone.localtime(reason.until).strftime("%Y-%m-%d %H:%M:%S"),
                display.duration(left),
            )
        links = format_html_join(
            ", ",
            '<a href="{}">#{}</a>',
            ((reverse("admin:django_outbox_job_change", args=[pk]), pk) for pk in reason.job_ids),
        )
        label = "Waiting behind it:" if reason.code == "holds_sequence" else "Held by"
        items.append(
            format_html(
                '<li data-reason="{}">{}{}{}</li>',
                reason.code,
                reason.text,
                until,
                format_html(" {} {}.", label, links) if reason.job_ids else "",
            )
        )
    return format_html(
        '<ul class="outbox-reasons">{}</ul>', format_html_join("", "{}", ((i,) for i in items))
    )
