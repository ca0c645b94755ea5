"""How values look in the admin: coloured statuses, ages, first lines, pretty JSON.

Everything shown goes through ``format_html`` or ``escape``: payloads, tracebacks and
response bodies come from users and from other people's servers.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

#: Shown where there is no value.
NOTHING = "\u2013"

#: Status colours: green done, blue waiting, amber busy, red failed, grey cancelled.
COLOURS = {
    "succeeded": "#1b7f3b",
    "queued": "#1f5fa8",
    "pending": "#1f5fa8",
    "running": "#a86400",
    "failed": "#b42318",
    "cancelled": "#6b7280",
}


def status_badge(status: str, label: str | None = None) -> SafeString:
    return format_html(
        '<span class="outbox-status" style="color:#fff;background:{};padding:1px 6px;'
        'border-radius:8px;white-space:nowrap">{}</span>',
        COLOURS.get(status, "#6b7280"),
        label or status,
    )


def age(since: datetime | None, now: datetime | None = None) -> str:
    """'3 s', '12 min', '5 h', '2 d': how long ago, short."""
    if since is None:
        return NOTHING
    return duration((now or timezone.now()) - since)


def duration(span: timedelta | float | None) -> str:
    if span is None:
        return NOTHING
    seconds = span.total_seconds() if isinstance(span, timedelta) else span
    if seconds < 0:
        return "in " + duration(-seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def first_line(text: str, limit: int = 120) -> str:
    lines = text.strip().splitlines()
    return _cut(lines[0] if lines else "", limit)


def last_error_line(errors: list[dict[str, Any]] | None, limit: int = 120) -> str:
    """The exception line of a job's latest error ('ValueError: bad input'): the last line
    of its traceback."""
    if not errors:
        return ""
    latest = errors[-1]
    lines = str(latest.get("traceback", "")).strip().splitlines()
    return _cut(lines[-1] if lines else str(latest.get("exception_class_path", "")), limit)


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def pretty_json(value: Any) -> SafeString:
    """JSON (a value, or text holding JSON) indented, escaped, in a <pre>."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return preformatted(value)
    return preformatted(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


def preformatted(text: str) -> SafeString:
    return format_html(
        '<pre style="white-space:pre-wrap;max-height:32em;overflow:auto;margin:0">{}</pre>', text
    )


def masked(secret: str) -> str:
    """Enough of a secret to tell two apart, never enough to use."""
    if not secret:
        return ""
    return f"{secret[:6]}…{'•' * 8}"
