"""What the portal's HTML forms send, read into the same fields the API takes and checked
by the same function (``inputs.endpoint_problems``, in the customers' terms): a form is
refused whole, field by field, before anything is written."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import QueryDict
from django.utils.dateparse import parse_datetime

from django_outbox import webhooks
from django_outbox.models import Endpoint
from django_outbox.portal import inputs
from django_outbox.webhooks import catalogue

#: The grace periods the rotate form offers, in seconds, and how they read.
GRACES = {0: "none: stop the old secret now", 3600: "1 hour", 86400: "24 hours", 604800: "7 days"}
#: What each signature scheme means for the receiver, in one line (the form's choices).
SCHEMES = {
    "v1": "v1: HMAC-SHA256, a shared whsec_ secret shown once",
    "v1a": "v1a: ed25519, verified with a whpk_ public key",
}
#: A textarea's line breaks, as browsers send them (CRLF) or as typed (LF, CR). Not
#: str.splitlines(), which would also split at control characters the header check must see.
LINES = re.compile(r"\r\n|\r|\n")


def endpoint_fields(data: QueryDict, *, scheme: str = "") -> tuple[dict[str, Any], dict[str, str]]:
    """An endpoint's fields from a form, and what is wrong with each (empty: nothing).

    ``event_types`` is a text field (names and filters separated by spaces or commas) or,
    with a catalogue declared, one checkbox per type: both arrive as a list. ``headers`` is
    a textarea, one ``Name: value`` a line. ``headers`` and ``signature_scheme`` are taken
    only when the form sends them: a form without them (a template of the host's own) never
    drops the headers nor rotates the key. ``scheme``: the endpoint's own, which is no
    change (nor checked again)."""
    fields: dict[str, Any] = {
        "url": data.get("url", "").strip(),
        "description": data.get("description", "").strip(),
        "event_types": _event_types(data),
    }
    errors: dict[str, str] = {}
    for name in ("rate_limit", "timeout"):
        given = data.get(name, "").strip()
        try:
            fields[name] = float(given) if given else None
        except ValueError:
            errors[name] = f"Must be a number, or empty, not {given!r}."
    if "headers" in data:
        try:
            fields["headers"] = headers(data.get("headers", ""))
        except ValueError as exc:
            errors["headers"] = str(exc)
    if "signature_scheme" in data and data.get("signature_scheme") != scheme:
        fields["signature_scheme"] = data.get("signature_scheme", "")
    errors |= inputs.endpoint_problems({k: v for k, v in fields.items() if k not in errors})
    return fields, errors


def _event_types(data: QueryDict) -> list[str]:
    given = (t for value in data.getlist("event_types") for t in re.split(r"[\s,]+", value))
    return list(dict.fromkeys(t for t in given if t))


def headers(text: str) -> dict[str, str]:
    """The headers of a textarea, one ``Name: value`` a line (blank lines skipped); a line
    without a name and a colon, or a name given twice, is a ValueError naming the line. A
    line's text is never repeated in a message: it may hold a credential. The names and
    values are checked afterwards, as the API's are (``webhooks/headers.py``)."""
    found: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(LINES.split(text), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        name = name.strip()
        if not colon or not name:
            raise ValueError(
                f"Line {number} is not a header: write one header a line, its name, a colon "
                "and its value, e.g. X-Api-Key: 4f2a9c."
            )
        if name.lower() in lines:
            raise ValueError(
                f"Line {number} sets {name!r} again (line {lines[name.lower()]} sets it): "
                "header names are case-insensitive. Set each once."
            )
        lines[name.lower()] = number
        found[name] = value.strip(" \t")
    return found


def sorted_headers(given: Mapping[str, str]) -> list[tuple[str, str]]:
    """An endpoint's headers by name (a JSON column need not keep their order)."""
    return sorted(given.items(), key=lambda item: item[0].lower())


def headers_text(given: Mapping[str, str]) -> str:
    return "".join(f"{name}: {value}\n" for name, value in sorted_headers(given))


def initial(endpoint: Endpoint) -> dict[str, Any]:
    """What the endpoint form shows of ``endpoint``, before any change."""
    return {
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": " ".join(endpoint.event_types),
        "picked": list(endpoint.event_types),
        "rate_limit": "" if endpoint.rate_limit is None else f"{endpoint.rate_limit:g}",
        "timeout": "" if endpoint.timeout is None else f"{endpoint.timeout:g}",
        "headers": headers_text(endpoint.headers),
        "signature_scheme": endpoint.signature_scheme,
    }


def sent(data: QueryDict, scheme: str = "v1") -> dict[str, Any]:
    """What the endpoint form shows again after it was refused: what was sent (``scheme``
    when it sent none)."""
    picked = _event_types(data)
    return {
        **{name: data.get(name, "") for name in ("url", "description", "rate_limit", "timeout")},
        "event_types": " ".join(picked),
        "picked": picked,
        "headers": data.get("headers", ""),
        "signature_scheme": data.get("signature_scheme", scheme),
    }


def event_type_choices(picked: list[str]) -> list[dict[str, Any]]:
    """The checkboxes of a declared catalogue: each declared type, then each filter the
    endpoint already has that is not one of them (``invoice.*``), so that saving the form
    keeps it. Empty when no catalogue is declared: the form has a text field instead."""
    declared = webhooks.event_types()
    if not declared:
        return []
    names = {event_type.name for event_type in declared}
    choices = [
        {"name": t.name, "description": t.description, "checked": t.name in picked}
        for t in declared
    ]
    for pattern in picked:
        if pattern not in names:
            matches = ", ".join(catalogue.matching(pattern)) or "no declared type"
            choices.append(
                {"name": pattern, "description": f"a filter: matches {matches}", "checked": True}
            )
    return choices


def scheme_choices(current: str = "") -> dict[str, str]:
    """The signature schemes available here, each with its line, and ``current`` (an
    endpoint's own, kept by saving the form even where it is no longer available)."""
    available = webhooks.signature_schemes()
    return {name: says for name, says in SCHEMES.items() if name in available or name == current}


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
