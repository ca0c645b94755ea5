"""What the portal's HTML forms send, read into the same fields the API takes and checked
by the same function (``webhooks.api.endpoint_problems``): a form is refused whole, field
by field, before anything is written."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import QueryDict
from django.utils.dateparse import parse_datetime

from django_outbox.webhooks import api

#: The grace periods the rotate form offers, in seconds, and how they read.
GRACES = {0: "none: stop the old secret now", 3600: "1 hour", 86400: "24 hours", 604800: "7 days"}


def endpoint_fields(data: QueryDict) -> tuple[dict[str, Any], dict[str, str]]:
    """An endpoint's fields from a form, and what is wrong with each (empty: nothing)."""
    fields: dict[str, Any] = {
        "url": data.get("url", "").strip(),
        "description": data.get("description", "").strip(),
        "event_types": [t for t in re.split(r"[\s,]+", data.get("event_types", "")) if t],
    }
    errors: dict[str, str] = {}
    for name in ("rate_limit", "timeout"):
        given = data.get(name, "").strip()
        try:
            fields[name] = float(given) if given else None
        except ValueError:
            errors[name] = f"Must be a number, or empty, not {given!r}."
    errors |= api.endpoint_problems(**{k: v for k, v in fields.items() if k not in errors})
    return fields, errors


def grace(data: QueryDict) -> timedelta | None:
    given = data.get("grace_seconds", "")
    if given.isdigit() and int(given) in GRACES:
        return timedelta(seconds=int(given))
    return None


def since(data: QueryDict) -> datetime | None:
    """The form's time, in UTC (a datetime-local field has no zone: the form says UTC)."""
    try:
        found = parse_datetime(data.get("since", "").strip())
    except ValueError:  # well formed, not a time: month 13
        found = None
    if found is None or found.year < 1970:
        return None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found
