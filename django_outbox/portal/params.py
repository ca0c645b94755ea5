"""A list's query string, checked: each parameter parsed by its own rule, an unknown one
or one given twice refused, every refusal a 400 problem naming the parameter."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import HttpRequest
from django.utils.dateparse import parse_datetime

from django_outbox.portal.problems import Problem
from django_outbox.webhooks.values import EVENT_TYPE

Parser = Callable[[str], Any]
#: Rows a page holds unless ``limit`` says otherwise, and the most it may say.
PAGE_SIZE, MAX_PAGE_SIZE = 50, 250
#: The largest id a database keeps (a bigint).
MAX_ID = 2**63 - 1
#: The times a filter may name (all the databases keep them).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LAST = datetime(9999, 12, 31, tzinfo=UTC)


def parse(request: HttpRequest, rules: dict[str, Parser]) -> dict[str, Any]:
    """The parameters of ``request`` by name, each parsed by its rule; ``limit`` and
    ``cursor`` are known to every list (the cursor is read by ``paging``)."""
    rules = {**rules, "limit": page_size, "cursor": str}
    unknown = sorted(set(request.GET) - set(rules))
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise Problem(
            "bad-request",
            f"Unknown query parameter{'s' * (len(unknown) > 1)} {names}: this list takes "
            f"{', '.join(sorted(rules))}.",
            errors={name: "Not a parameter of this list." for name in unknown},
        )
    found: dict[str, Any] = {}
    for name, rule in rules.items():
        values = request.GET.getlist(name)
        if not values:
            continue
        if len(values) > 1:
            raise Problem(
                "bad-request",
                f"{name} is given {len(values)} times: give it once.",
                errors={name: "Given more than once."},
            )
        try:
            found[name] = rule(values[0])
        except ValueError as exc:
            raise Problem("bad-request", f"{name}: {exc}", errors={name: str(exc)}) from None
    return found


def page_size(value: str) -> int:
    number = whole(value)
    if number > MAX_PAGE_SIZE:
        raise ValueError(f"a page holds at most {MAX_PAGE_SIZE} rows, not {value!r}.")
    return number


def whole(value: str) -> int:
    """A positive whole number (an id, a size)."""
    if not value.isascii() or not value.isdigit() or not 0 < int(value) <= MAX_ID:
        raise ValueError(f"must be a whole number from 1 to {MAX_ID}, not {value!r}.")
    return int(value)


def one_of(choices: Iterable[str]) -> Parser:
    allowed = tuple(choices)

    def choose(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {value!r}.")
        return value

    return choose


def event_type(value: str) -> str:
    if not EVENT_TYPE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an event type: 1 to 255 letters, digits and '_ . : -', e.g. "
            "'invoice.paid'."
        )
    return value


def moment(value: str) -> datetime:
    """An ISO 8601 time with its time zone: ``2026-05-01T12:00:00Z``."""
    try:
        found = parse_datetime(value)
    except ValueError:
        found = None
    if found is None or found.tzinfo is None:
        raise ValueError(
            f"{value!r} is not a time: write ISO 8601 with a time zone, e.g. 2026-05-01T12:00:00Z."
        )
    try:
        # In UTC: databases keep offsets of up to 15:59 only (PostgreSQL), Python 23:59.
        found = found.astimezone(UTC)
    except OverflowError:
        found = EPOCH - timedelta(days=1)
    if not EPOCH <= found <= LAST:
        raise ValueError(f"{value!r} is out of range: times go from 1970 to 9999.")
    return found
