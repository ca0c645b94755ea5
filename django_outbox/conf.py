"""The ``OUTBOX`` settings dict: defaults, validation, and a cache that resets under
``override_settings``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver


@dataclass(frozen=True, slots=True)
class OutboxSettings:
    #: Seconds an idle worker waits before looking for due jobs again when it has no
    #: wake-ups (WAKE resolves to "poll").
    POLL_INTERVAL: float = 1.0
    #: How idle workers learn of new jobs: "auto", "postgres", "redis" or "poll".
    WAKE: str = "auto"
    #: The django-redis cache alias for Redis wake-ups.
    REDIS_ALIAS: str = "default"
    #: With wake-ups, seconds between an idle worker's own looks for work (the poll that
    #: finds lost signals) and rescues of expired leases.
    STALLED_CHECK_SECONDS: float = 30.0
    #: Seconds a claimed job stays leased to its worker without a heartbeat.
    LEASE_SECONDS: float = 30.0
    #: Seconds between a worker's heartbeats (lease renewals and rescue of expired leases).
    HEARTBEAT_SECONDS: float = 10.0
    #: Attempts a job gets when its task does not say (the first run counts).
    DEFAULT_MAX_ATTEMPTS: int = 3
    #: Full-jitter backoff: the first retry waits up to BACKOFF_BASE seconds, the ceiling
    #: doubles per attempt up to BACKOFF_CAP.
    BACKOFF_BASE: float = 1.0
    BACKOFF_CAP: float = 3600.0


_NUMBER_RULES: dict[str, tuple[type, float]] = {
    # name: (type, exclusive lower bound)
    "POLL_INTERVAL": (float, 0.0),
    "LEASE_SECONDS": (float, 0.0),
    "HEARTBEAT_SECONDS": (float, 0.0),
    "DEFAULT_MAX_ATTEMPTS": (int, 0),
    "BACKOFF_BASE": (float, 0.0),
    "BACKOFF_CAP": (float, 0.0),
    "STALLED_CHECK_SECONDS": (float, 0.0),
}

#: No number setting may exceed a year's seconds (keeps NaN and infinity out too).
MAX_NUMBER = 366 * 24 * 3600.0

WAKE_MODES = ("auto", "postgres", "redis", "poll")


def settings_errors(raw: Any) -> list[str]:
    """Every problem with an ``OUTBOX`` value, as sentences; empty when it is valid."""
    if not isinstance(raw, dict):
        return [f"OUTBOX must be a dict, not {type(raw).__name__}."]
    errors = []
    known = OutboxSettings.__dataclass_fields__.keys()
    for key in raw.keys() - known:
        errors.append(f"OUTBOX[{key!r}] is not a known setting (known: {', '.join(known)}).")
    for key, (kind, floor) in _NUMBER_RULES.items():
        if key not in raw:
            continue
        value = raw[key]
        allowed = (int,) if kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, allowed):
            wanted = "a whole number" if kind is int else "a number"
            errors.append(f"OUTBOX[{key!r}] must be {wanted}, not {value!r}.")
        elif not floor < value <= MAX_NUMBER:
            errors.append(
                f"OUTBOX[{key!r}] must be greater than {floor:g} and at most {MAX_NUMBER:g},"
                f" not {value!r}."
            )
    if "WAKE" in raw and raw["WAKE"] not in WAKE_MODES:
        errors.append(
            f"OUTBOX['WAKE'] must be one of {', '.join(WAKE_MODES)}, not {raw['WAKE']!r}."
        )
    if "REDIS_ALIAS" in raw and (not isinstance(raw["REDIS_ALIAS"], str) or not raw["REDIS_ALIAS"]):
        errors.append(
            f"OUTBOX['REDIS_ALIAS'] must be a cache alias name, not {raw['REDIS_ALIAS']!r}."
        )
    if not errors:
        merged = _merge(raw)
        if merged.HEARTBEAT_SECONDS >= merged.LEASE_SECONDS:
            errors.append(
                "OUTBOX['HEARTBEAT_SECONDS'] must be shorter than OUTBOX['LEASE_SECONDS'], "
                "or leases expire between heartbeats."
            )
        if merged.BACKOFF_CAP < merged.BACKOFF_BASE:
            errors.append("OUTBOX['BACKOFF_CAP'] must not be below OUTBOX['BACKOFF_BASE'].")
    return errors


def known_settings() -> set[str]:
    return set(OutboxSettings.__dataclass_fields__)


def _merge(raw: dict[str, Any]) -> OutboxSettings:
    values = {key: value for key, value in raw.items() if key in known_settings()}
    for key, (kind, _floor) in _NUMBER_RULES.items():
        if key in values:
            values[key] = kind(values[key])
    return OutboxSettings(**values)


@cache
def get() -> OutboxSettings:
    """The validated settings, read once; raises ImproperlyConfigured when they are wrong."""
    raw = getattr(settings, "OUTBOX", {})
    errors = settings_errors(raw)
    if errors:
        raise ImproperlyConfigured(" ".join(errors))
    return _merge(raw)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "OUTBOX":
        get.cache_clear()
