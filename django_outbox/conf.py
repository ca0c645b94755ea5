"""The ``OUTBOX`` settings dict: defaults, validation, and a cache that resets under
``override_settings``."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_outbox.lib import text
from django_outbox.lib.rate import Rate

T = TypeVar("T")

#: The most a size limit may allow: bigger rows belong in files or object storage.
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """``OUTBOX["WEBHOOKS"]``: how webhook deliveries are sent and retried."""

    #: The job queue deliveries run on, and the TASKS alias of their jobs.
    QUEUE: str = "webhooks"
    BACKEND: str = "default"
    #: Seconds before each attempt: the first is the first attempt; each later delay is a
    #: draw below its value (never zero). After the last attempt the delivery has failed.
    RETRY_SCHEDULE: tuple[float, ...] = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)
    #: Seconds to connect, and for the whole request (an endpoint may set its own).
    CONNECT_TIMEOUT: float = 5.0
    TIMEOUT: float = 15.0
    #: Networks (CIDR) deliveries may reach although they are not public, e.g. 10.0.0.0/8.
    ALLOWED_NETWORKS: tuple[str, ...] = ()
    #: Whether plain http:// endpoints are allowed.
    ALLOW_HTTP: bool = False
    #: Latest-attempt lookups of deliveries running at once share one query: up to this
    #: many, gathered for up to this long.
    LOOKUP_BATCH_SIZE: int = 50
    LOOKUP_BATCH_WAIT_MS: float = 50.0
    #: Requests one worker process sends to one endpoint at once.
    MAX_PER_ENDPOINT: int = 10
    #: An endpoint whose deliveries have all failed for this long, over at least this many
    #: attempts in a row, is disabled.
    DISABLE_AFTER_SECONDS: float = 5 * 24 * 3600.0
    DISABLE_AFTER_ATTEMPTS: int = 20
    #: Seconds the previous secret keeps signing after a rotation.
    ROTATION_GRACE_SECONDS: float = 24 * 3600.0
    USER_AGENT: str = "django-outbox-webhooks"
    #: The largest a message's payload may be: the signed envelope, in bytes.
    MAX_PAYLOAD_BYTES: int = 1024 * 1024


_WEBHOOK_NUMBER_RULES: dict[str, tuple[type, float, float]] = {
    # name: (type, exclusive lower bound, inclusive upper bound)
    "CONNECT_TIMEOUT": (float, 0.0, 600.0),
    "TIMEOUT": (float, 0.0, 600.0),
    "LOOKUP_BATCH_SIZE": (int, 0, 100),
    "LOOKUP_BATCH_WAIT_MS": (float, -1e-9, 10_000.0),
    "MAX_PER_ENDPOINT": (int, 0, 1000),
    "DISABLE_AFTER_SECONDS": (float, 0.0, 366 * 24 * 3600.0),
    "DISABLE_AFTER_ATTEMPTS": (int, 0, 1_000_000),
    "ROTATION_GRACE_SECONDS": (float, -1e-9, 366 * 24 * 3600.0),
    "MAX_PAYLOAD_BYTES": (int, 0, MAX_BYTES),
}


def webhook_settings_errors(raw: Any) -> list[str]:
    """Every problem with an ``OUTBOX["WEBHOOKS"]`` value, as sentences."""
    where = "OUTBOX['WEBHOOKS']"
    errors = _shape_errors(raw, where, WebhookSettings.__dataclass_fields__.keys())
    if not isinstance(raw, dict):
        return errors
    for key, (kind, floor, ceiling) in _WEBHOOK_NUMBER_RULES.items():
        seconds = key.endswith(("SECONDS", "TIMEOUT"))
        if key in raw and (problem := _number_problem(raw[key], kind, floor, ceiling, seconds)):
            errors.append(f"{where}[{key!r}] must be {problem}, not {raw[key]!r}.")
    for key in ("QUEUE", "BACKEND", "USER_AGENT"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            errors.append(f"{where}[{key!r}] must be a non-empty string, not {raw[key]!r}.")
    if "ALLOW_HTTP" in raw and not isinstance(raw["ALLOW_HTTP"], bool):
        errors.append(f"{where}['ALLOW_HTTP'] must be True or False, not {raw['ALLOW_HTTP']!r}.")
    if "RETRY_SCHEDULE" in raw:
        schedule = raw["RETRY_SCHEDULE"]
        if (
            not isinstance(schedule, list | tuple)
            or not schedule
            or any(_number_problem(d, float, -1e-9, MAX_NUMBER) for d in schedule)
        ):
            errors.append(
                f"{where}['RETRY_SCHEDULE'] must be a non-empty list of seconds (numbers from 0"
                f" to {_most(MAX_NUMBER, seconds=True)}), not {schedule!r}."
            )
    if "ALLOWED_NETWORKS" in raw:
        networks = raw["ALLOWED_NETWORKS"]
        if not isinstance(networks, list | tuple):
            errors.append(f"{where}['ALLOWED_NETWORKS'] must be a list, not {networks!r}.")
        else:
            for network in networks:
                try:
                    ipaddress.ip_network(network)
                except (TypeError, ValueError) as exc:
                    errors.append(
                        f"{where}['ALLOWED_NETWORKS']: {network!r} is not a network ({exc})."
                    )
    return errors


def _shape_errors(raw: Any, where: str, known: Iterable[str]) -> list[str]:
    """A settings dict must be a dict, and hold only known keys."""
    if not isinstance(raw, dict):
        return [f"{where} must be a dict, not {type(raw).__name__}."]
    names = list(known)
    return [
        f"{where}[{key!r}] is not a known setting (known: {', '.join(names)})."
        for key in sorted(raw.keys() - set(names), key=str)
    ]


def _number_problem(
    value: Any, kind: type, floor: float, ceiling: float, seconds: bool = False
) -> str | None:
    """What ``value`` should be, or None when it is a fitting number. A floor below 0
    stands for "at least 0"; ``seconds`` adds the ceiling as a duration when it helps."""
    allowed = (int,) if kind is int else (int, float)
    wanted = "a whole number" if kind is int else "a number"
    if isinstance(value, bool) or not isinstance(value, allowed) or not floor < value <= ceiling:
        high = _most(ceiling, seconds)
        if floor < 0:
            return f"{wanted} from 0 to {high}"
        return f"{wanted} greater than {text.number(floor)} and at most {high}"
    return None


def _most(ceiling: float, seconds: bool) -> str:
    """``31,622,400 (366 days)`` for a ceiling in seconds of an hour or more, else the number."""
    shown = text.number(ceiling)
    return f"{shown} ({text.duration(ceiling)})" if seconds and ceiling >= 3600 else shown


def _merge_webhooks(raw: dict[str, Any]) -> WebhookSettings:
    values = {
        key: value for key, value in raw.items() if key in WebhookSettings.__dataclass_fields__
    }
    for key, (kind, _floor, _ceiling) in _WEBHOOK_NUMBER_RULES.items():
        if key in values:
            values[key] = kind(values[key])
    for key in ("RETRY_SCHEDULE", "ALLOWED_NETWORKS"):
        if key in values:
            values[key] = tuple(values[key])
    return WebhookSettings(**values)


#: The statuses of finished jobs (JobStatus's values; models cannot be imported here).
FINISHED_STATUSES = ("succeeded", "failed", "cancelled")

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: object) -> timedelta:
    """'90s', '30m', '12h', '7d', '2w' → a timedelta; ValueError says what is accepted."""
    match = _AGE.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(
            f"{text!r} is not an age: write a number and a unit (s, m, h, d or w), "
            "e.g. 90s, 30m, 12h, 7d, 2w."
        )
    age = timedelta(seconds=float(match[1]) * _UNIT_SECONDS[match[2]])
    if age <= timedelta(0):
        raise ValueError(f"{text!r}: the age must be above zero.")
    return age


def parse_statuses(names: Iterable[object]) -> list[str]:
    """Finished job statuses only; anything else is a ValueError naming the choices."""
    statuses = [str(name).strip() for name in names if str(name).strip()]
    wrong = [name for name in statuses if name not in FINISHED_STATUSES]
    choices = ", ".join(FINISHED_STATUSES)
    if wrong:
        named = ", ".join(repr(name) for name in wrong)
        raise ValueError(
            f"Jobs cannot be pruned by status{'es' * (len(wrong) > 1)} {named}: choose among "
            f"{choices} (queued and running jobs are never pruned)."
        )
    if not statuses:
        raise ValueError(f"No job status to prune given: choose among {choices}.")
    return statuses


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """``OUTBOX["RETENTION"]``: what workers delete on their own, and how often."""

    #: Jobs finished, and messages created, longer ago than this go (an age: 7d, 12h…).
    OLDER_THAN: str = "7d"
    #: The finished statuses of jobs that go.
    STATUSES: tuple[str, ...] = FINISHED_STATUSES
    #: Seconds between two prunes by one worker (each worker starts at a random point).
    EVERY_SECONDS: float = 3600.0

    @property
    def age(self) -> timedelta:
        return parse_age(self.OLDER_THAN)


def retention_settings_errors(raw: Any) -> list[str]:
    where = "OUTBOX['RETENTION']"
    if raw is None:
        return []
    errors = _shape_errors(raw, where, RetentionSettings.__dataclass_fields__.keys())
    if not isinstance(raw, dict):
        return errors
    if "OLDER_THAN" in raw:
        try:
            parse_age(raw["OLDER_THAN"])
        except ValueError as exc:
            errors.append(f"{where}['OLDER_THAN']: {exc}")
    if "STATUSES" in raw:
        if not isinstance(raw["STATUSES"], list | tuple):
            errors.append(f"{where}['STATUSES'] must be a list, not {raw['STATUSES']!r}.")
        else:
            try:
                parse_statuses(raw["STATUSES"])
            except ValueError as exc:
                errors.append(f"{where}['STATUSES']: {exc}")
    if "EVERY_SECONDS" in raw and (
        problem := _number_problem(raw["EVERY_SECONDS"], float, 0.0, MAX_NUMBER, seconds=True)
    ):
        errors.append(f"{where}['EVERY_SECONDS'] must be {problem}, not {raw['EVERY_SECONDS']!r}.")
    return errors


def _merge_retention(raw: dict[str, Any] | None) -> RetentionSettings | None:
    if raw is None:
        return None
    values = dict(raw)
    if "STATUSES" in values:
        values["STATUSES"] = tuple(values["STATUSES"])
    if "EVERY_SECONDS" in values:
        values["EVERY_SECONDS"] = float(values["EVERY_SECONDS"])
    return RetentionSettings(**values)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """``OUTBOX["QUEUES"][name]``: limits on one queue, shared by every worker."""

    #: At most this many jobs of the queue run at once, across all workers and machines.
    concurrency: int | None = None
    #: At most this many jobs of the queue start per second, on average, across all workers.
    rate: float | None = None
    #: With ``rate``: how many may start at once after a quiet spell (default: one second's
    #: worth, at least 1).
    burst: int | None = None

    @property
    def rate_limit(self) -> Rate | None:
        return None if self.rate is None else Rate.of(self.rate, self.burst)


#: Most jobs per second a queue's rate may allow, and most requests per second an
#: endpoint's: buckets count time in seconds since the epoch, exact to about 0.2 µs, which
#: must stay a small part of a token's interval.
MAX_RATE = 10_000.0


def queue_settings_errors(raw: Any) -> list[str]:
    where = "OUTBOX['QUEUES']"
    if not isinstance(raw, dict):
        return [f"{where} must be a dict of queue settings by queue name, not {raw!r}."]
    errors = []
    rules: dict[str, tuple[type, float, float]] = {
        "concurrency": (int, 0, 100_000),
        "rate": (float, 0, MAX_RATE),
        "burst": (int, 0, 100_000),
    }
    for name, options in raw.items():
        at = f"{where}[{name!r}]"
        errors += _shape_errors(options, at, QueueSettings.__dataclass_fields__.keys())
        if not isinstance(options, dict):
            continue
        for key, (kind, floor, ceiling) in rules.items():
            if key in options and (problem := _number_problem(options[key], kind, floor, ceiling)):
                errors.append(f"{at}[{key!r}] must be {problem}, not {options[key]!r}.")
        if "burst" in options and "rate" not in options:
            errors.append(f"{at}['burst'] needs a 'rate' (jobs per second) to go with it.")
        if not options.keys() & {"concurrency", "rate"}:
            errors.append(f"{at} must set 'concurrency', 'rate', or both.")
    return errors


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """``OUTBOX["HEALTH"]``: what ``outbox_health`` and the health URL call unhealthy."""

    #: Queues that must have a live worker even when nothing is due (queues with due
    #: jobs always must).
    QUEUES: tuple[str, ...] = ()
    #: The oldest due job may wait at most this long past its time.
    MAX_DUE_AGE_SECONDS: float = 300.0
    #: The failure rate of recently finished jobs may be at most this (0 to 1) ...
    MAX_FAILURE_RATE: float = 0.5
    #: ... among the jobs finished in this window (the latest 1,000 at most) ...
    WINDOW_SECONDS: float = 600.0
    #: ... once at least this many finished in it.
    MIN_FINISHED: int = 20
    #: A bearer token the health URL accepts besides a staff session ("": staff only).
    TOKEN: str = ""


def health_settings_errors(raw: Any) -> list[str]:
    where = "OUTBOX['HEALTH']"
    errors = _shape_errors(raw, where, HealthSettings.__dataclass_fields__.keys())
    if not isinstance(raw, dict):
        return errors
    queues = raw.get("QUEUES", [])
    if not isinstance(queues, list | tuple) or not all(isinstance(q, str) and q for q in queues):
        errors.append(f"{where}['QUEUES'] must be a list of queue names, not {queues!r}.")
    for key, kind, floor, ceiling in (
        ("MAX_DUE_AGE_SECONDS", float, 0.0, MAX_NUMBER),
        ("WINDOW_SECONDS", float, 0.0, MAX_NUMBER),
        ("MIN_FINISHED", int, 0, 1000),
    ):
        seconds = key.endswith("SECONDS")
        if key in raw and (problem := _number_problem(raw[key], kind, floor, ceiling, seconds)):
            errors.append(f"{where}[{key!r}] must be {problem}, not {raw[key]!r}.")
    rate = raw.get("MAX_FAILURE_RATE", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        errors.append(f"{where}['MAX_FAILURE_RATE'] must be a number from 0 to 1, not {rate!r}.")
    if "TOKEN" in raw and not isinstance(raw["TOKEN"], str):
        errors.append(f"{where}['TOKEN'] must be a string, not {type(raw['TOKEN']).__name__}.")
    elif raw.get("TOKEN") and len(raw["TOKEN"]) < 16:
        errors.append(f"{where}['TOKEN'] must be at least 16 characters long (or empty).")
    return errors


def _merge_health(raw: dict[str, Any]) -> HealthSettings:
    values = dict(raw)
    if "QUEUES" in values:
        values["QUEUES"] = tuple(values["QUEUES"])
    for key in ("MAX_DUE_AGE_SECONDS", "WINDOW_SECONDS", "MAX_FAILURE_RATE"):
        if key in values:
            values[key] = float(values[key])
    return HealthSettings(**values)


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
    #: Webhook delivery; see WebhookSettings.
    WEBHOOKS: WebhookSettings = field(default_factory=WebhookSettings)
    #: None: nothing is deleted unless ``outbox_prune`` is run.
    RETENTION: RetentionSettings | None = None
    #: Cron schedules by name (see django_outbox.schedules; checked by E004).
    SCHEDULES: dict[str, Any] = field(default_factory=dict)
    #: Limits per queue name (queues not listed have none).
    QUEUES: dict[str, QueueSettings] = field(default_factory=dict)
    #: Where rate limits keep their buckets: "redis" (the django-redis cache REDIS_ALIAS),
    #: "database", or "auto": Redis when REDIS_ALIAS is a django-redis cache.
    RATE_LIMIT_STORE: str = "auto"
    #: The largest a job's arguments may be, as stored JSON (args and kwargs together).
    MAX_ARGUMENTS_BYTES: int = 1024 * 1024
    #: What outbox_health and the health URL call unhealthy; see HealthSettings.
    HEALTH: HealthSettings = field(default_factory=HealthSettings)

    def concurrency_limits(self, queues: Iterable[str]) -> dict[str, int]:
        """The global concurrency limit of each of ``queues`` that has one."""
        return self._per_queue(queues, lambda options: options.concurrency)

    def rate_limits(self, queues: Iterable[str]) -> dict[str, Rate]:
        """The rate limit of each of ``queues`` that has one."""
        return self._per_queue(queues, lambda options: options.rate_limit)

    def _per_queue(
        self, queues: Iterable[str], read: Callable[[QueueSettings], T | None]
    ) -> dict[str, T]:
        found = {}
        for queue in queues:
            options = self.QUEUES.get(queue)
            value = None if options is None else read(options)
            if value is not None:
                found[queue] = value
        return found


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
RATE_LIMIT_STORES = ("auto", "redis", "database")


def settings_errors(raw: Any) -> list[str]:
    """Every problem with an ``OUTBOX`` value, as sentences; empty when it is valid."""
    errors = _shape_errors(raw, "OUTBOX", OutboxSettings.__dataclass_fields__.keys())
    if not isinstance(raw, dict):
        return errors
    for key, (kind, floor) in _NUMBER_RULES.items():
        if key not in raw:
            continue
        value = raw[key]
        allowed = (int,) if kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, allowed):
            wanted = "a whole number" if kind is int else "a number"
            errors.append(f"OUTBOX[{key!r}] must be {wanted}, not {value!r}.")
        elif not floor < value <= MAX_NUMBER:
            high = _most(MAX_NUMBER, seconds=key != "DEFAULT_MAX_ATTEMPTS")
            errors.append(
                f"OUTBOX[{key!r}] must be greater than {text.number(floor)} and at most "
                f"{high}, not {value!r}."
            )
    if "WAKE" in raw and raw["WAKE"] not in WAKE_MODES:
        errors.append(
            f"OUTBOX['WAKE'] must be one of {', '.join(WAKE_MODES)}, not {raw['WAKE']!r}."
        )
    if "RATE_LIMIT_STORE" in raw and raw["RATE_LIMIT_STORE"] not in RATE_LIMIT_STORES:
        errors.append(
            f"OUTBOX['RATE_LIMIT_STORE'] must be one of {', '.join(RATE_LIMIT_STORES)}, "
            f"not {raw['RATE_LIMIT_STORE']!r}."
        )
    if "REDIS_ALIAS" in raw and (not isinstance(raw["REDIS_ALIAS"], str) or not raw["REDIS_ALIAS"]):
        errors.append(
            f"OUTBOX['REDIS_ALIAS'] must be a cache alias name, not {raw['REDIS_ALIAS']!r}."
        )
    if "MAX_ARGUMENTS_BYTES" in raw and (
        problem := _number_problem(raw["MAX_ARGUMENTS_BYTES"], int, 0, MAX_BYTES)
    ):
        errors.append(
            f"OUTBOX['MAX_ARGUMENTS_BYTES'] must be {problem}, not {raw['MAX_ARGUMENTS_BYTES']!r}."
        )
    if "WEBHOOKS" in raw:
        errors.extend(webhook_settings_errors(raw["WEBHOOKS"]))
    if "RETENTION" in raw:
        errors.extend(retention_settings_errors(raw["RETENTION"]))
    if "QUEUES" in raw:
        errors.extend(queue_settings_errors(raw["QUEUES"]))
    if "HEALTH" in raw:
        errors.extend(health_settings_errors(raw["HEALTH"]))
    if "SCHEDULES" in raw and not isinstance(raw["SCHEDULES"], dict):
        errors.append(
            "OUTBOX['SCHEDULES'] must be a dict of schedules by name, "
            f"not {type(raw['SCHEDULES']).__name__}."
        )
    if not errors:
        merged = _merge(raw)
        heartbeat, lease = text.number(merged.HEARTBEAT_SECONDS), text.number(merged.LEASE_SECONDS)
        if merged.HEARTBEAT_SECONDS >= merged.LEASE_SECONDS:
            errors.append(
                f"OUTBOX['HEARTBEAT_SECONDS'] ({heartbeat}) must be shorter than "
                f"OUTBOX['LEASE_SECONDS'] ({lease}), or leases expire between heartbeats."
            )
        if merged.BACKOFF_CAP < merged.BACKOFF_BASE:
            errors.append(
                f"OUTBOX['BACKOFF_CAP'] ({text.number(merged.BACKOFF_CAP)}) must not be below "
                f"OUTBOX['BACKOFF_BASE'] ({text.number(merged.BACKOFF_BASE)})."
            )
        if merged.WEBHOOKS.TIMEOUT >= merged.LEASE_SECONDS:
            errors.append(
                f"OUTBOX['WEBHOOKS']['TIMEOUT'] ({text.number(merged.WEBHOOKS.TIMEOUT)}) must be "
                f"shorter than OUTBOX['LEASE_SECONDS'] ({lease}), so a delivery's lease "
                "outlasts its request."
            )
    return errors


def known_settings() -> set[str]:
    return set(OutboxSettings.__dataclass_fields__)


def _merge(raw: dict[str, Any]) -> OutboxSettings:
    values = {key: value for key, value in raw.items() if key in known_settings()}
    for key, (kind, _floor) in _NUMBER_RULES.items():
        if key in values:
            values[key] = kind(values[key])
    if "WEBHOOKS" in values:
        values["WEBHOOKS"] = _merge_webhooks(values["WEBHOOKS"])
    if "RETENTION" in values:
        values["RETENTION"] = _merge_retention(values["RETENTION"])
    if "HEALTH" in values:
        values["HEALTH"] = _merge_health(values["HEALTH"])
    if "QUEUES" in values:
        values["QUEUES"] = {
            name: QueueSettings(**options) for name, options in values["QUEUES"].items()
        }
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
