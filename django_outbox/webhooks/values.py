"""The checks of the values the webhooks' public functions take. Each returns the value
as it is stored, or raises ValidationError naming the argument and what it must be; the
functions of endpoints.py, secrets.py and sending.py call them before they write."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError

from django_outbox import conf
from django_outbox.lib import text
from django_outbox.models import SignatureScheme
from django_outbox.webhooks import catalogue, signing

#: Event types: letters, digits and ``_ . : -``, e.g. "invoice.paid".
EVENT_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
#: Filters may also use ``*``, which matches any run of characters: "invoice.*".
PATTERN = re.compile(r"[A-Za-z0-9_.:*-]{1,255}")
MAX_TIMEOUT = 600.0
MAX_ORDERING_KEY = 200
#: The longest a rotated-out secret may keep signing.
MAX_GRACE = timedelta(days=366)


def short_text(name: str, value: Any, allow_empty: bool = True) -> str:
    if not isinstance(value, str) or len(value) > 255 or (not value and not allow_empty):
        wanted = "a string of up to 255 characters" + ("" if allow_empty else ", not empty")
        raise ValidationError(f"{name} must be {wanted}, not {value!r}.")
    return value


def event_type(value: Any) -> str:
    if not isinstance(value, str) or not EVENT_TYPE.fullmatch(value):
        raise ValidationError(
            f"{value!r} is not an event type: use 1 to 255 letters, digits and "
            "'_ . : -', e.g. 'invoice.paid'."
        )
    return value


def ordering_key(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= MAX_ORDERING_KEY):
        raise ValidationError(
            f"ordering_key must be a string of 1 to {MAX_ORDERING_KEY} characters, or None "
            f"for no order, not {value!r}."
        )
    return value


def patterns(event_types: Iterable[str] | None) -> list[str]:
    if event_types is None:
        return []
    if isinstance(event_types, str):
        raise ValidationError(
            f"event_types must be a list of event types, not the string {event_types!r}."
        )
    found = list(event_types)
    for pattern in found:
        if not isinstance(pattern, str) or not PATTERN.fullmatch(pattern):
            raise ValidationError(
                f"{pattern!r} is not an event type filter: use letters, digits, '_ . : -' and"
                " '*' (any run of characters), e.g. 'invoice.*'."
            )
    return found


def filters(event_types: Iterable[str] | None) -> list[str]:
    """An endpoint's filters, checked against the catalogue when one is declared."""
    found = patterns(event_types)
    catalogue.check_patterns(found)
    return found


def scheme(value: str) -> str:
    if value not in SignatureScheme.values:
        raise ValidationError(
            f"signature_scheme must be one of {', '.join(SignatureScheme.values)}, not {value!r}."
        )
    if value == SignatureScheme.V1A and not signing.ed25519_available():
        raise ValidationError(
            "The signature scheme 'v1a' (ed25519) needs the cryptography package, which is not "
            f"installed here: {signing.ED25519_INSTALL}."
        )
    return str(value)


def key(secret: str | None, of_scheme: str) -> str:
    """The key an endpoint signs with: ``secret`` checked for ``of_scheme``, or a new one."""
    if secret is None:
        return signing.generate_key(of_scheme)
    try:
        signing.check_key(secret, of_scheme)
    except (signing.InvalidSecret, signing.SchemeUnavailable) as exc:
        raise ValidationError(str(exc)) from None
    return secret


def description(value: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"description must be a string, not {value!r}.")
    return value


def timeout(value: float | None) -> float | None:
    if value is None:
        return None
    lease = conf.get().LEASE_SECONDS
    limit = min(MAX_TIMEOUT, lease)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < limit:
        why = (
            "the most a request may take"
            if limit < lease
            else "OUTBOX['LEASE_SECONDS'], so a lease outlasts its request"
        )
        raise ValidationError(
            f"timeout must be a number of seconds above 0 and below {text.number(limit)} "
            f"({why}), not {value!r}."
        )
    return float(value)


def rate_limit(value: float | None) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= conf.MAX_RATE
    ):
        raise ValidationError(
            f"rate_limit must be a number of requests per second above 0 and at most "
            f"{text.number(conf.MAX_RATE)}, or None for no limit, not {value!r}."
        )
    return float(value)


def grace(value: timedelta | None) -> timedelta:
    """How long a rotated-out key keeps signing (None: ``ROTATION_GRACE_SECONDS``)."""
    if value is None:
        value = timedelta(seconds=conf.get().WEBHOOKS.ROTATION_GRACE_SECONDS)
    if not isinstance(value, timedelta) or not timedelta(0) <= value <= MAX_GRACE:
        raise ValidationError(
            f"grace must be a timedelta from 0 to {MAX_GRACE.days} days, not {value!r}; "
            "timedelta(0) stops the old secret at once."
        )
    return value
