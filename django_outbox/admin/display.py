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

#: Status colours: green done, blue waiting, amber busy, red failed, grey cancelled
#: (static/django_outbox/admin.css has the same, a rule each).
COLOURS = {
    "succeeded": "#1b7f3b",
    "waiting": "#5b5fc7",
    "held": "#5b5fc7",
    "queued": "#1f5fa8",
    "pending": "#1f5fa8",
    "running": "#a86400",
    "failed": "#b42318",
    "cancelled": "#6b7280",
}


def status_badge(status: str, label: str | None = None, title: str = "") -> SafeString:
    """A status on its colour: static/django_outbox/admin.css has a rule for each of
    COLOURS (grey for any other)."""
    return format_html(
        '<span class="outbox-status outbox-status-{}"{}>{}</span>',
        status if status in COLOURS else "other",
        format_html(' title="{}"', title) if title else "",
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


#: The widths ``cut()`` cuts at, in em: admin.css has a class for each.
CUT_WIDTHS = (8, 10, 12, 13, 14, 16, 18, 20, 30)


def cut(text: str, width_em: int | None = None, shown: str | None = None) -> SafeString | str:
    """``text`` (or ``shown``, a short form of it) on one line, cut with an ellipsis where
    it is wider than ``width_em`` (one of CUT_WIDTHS; None: than the width its list column
    has left, see static/django_outbox/admin.css); ``text`` whole in its title."""
    if not text:
        return ""
    shown = text if shown is None else shown
    if width_em is None:
        return format_html('<span class="outbox-cut outbox-fill" title="{}">{}</span>', text, shown)
    if width_em not in CUT_WIDTHS:
        raise ValueError(f"cut() cuts at {CUT_WIDTHS} em (admin.css), not {width_em!r}.")
    return format_html(
        '<span class="outbox-cut outbox-w{}" title="{}">{}</span>', width_em, text, shown
    )


def without_module(error_line: str) -> str:
    """'ConnectionError: refused' for 'requests.exceptions.ConnectionError: refused'."""
    name, colon, rest = error_line.partition(":")
    if " " in name or "." not in name:
        return error_line
    return name.rsplit(".", 1)[-1] + colon + rest


def dated(text: str, at: datetime | None, what: str = "") -> SafeString | str:
    """``text`` (an age, say) with the exact time it stands for in its title."""
    if at is None:
        return text
    title = f"{what} {timezone.localtime(at):%Y-%m-%d %H:%M:%S}".strip()
    return format_html('<span title="{}">{}</span>', title, text)


def ago(at: datetime | None, what: str = "") -> SafeString | str:
    """'4 min ago', with the time in its title."""
    return NOTHING if at is None else dated(f"{age(at)} ago", at, what)


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
    return format_html('<pre class="outbox-pre">{}</pre>', text)


def masked(secret: str) -> str:
    """Enough of a secret to tell two apart, never enough to use."""
    if not secret:
        return ""
    return f"{secret[:6]}…{'•' * 8}"
