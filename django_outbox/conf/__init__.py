"""The ``OUTBOX`` settings dict, each setting declared once: its type, default, bounds and
a line saying what it is (``rules.setting()``). The system checks' sentences and the
values' types follow from those declarations (``conf/rules.py``); the settings are read
once and cached, and the cache resets under ``override_settings``.

Each group of settings (``OUTBOX`` itself, ``OUTBOX["WEBHOOKS"]``, a queue's limits …)
names the system check that reports its problems, in its ``check_id``.

One module over 400 lines: every setting is declared here and nowhere else, so that
docs/settings.md, the checks and the code read one list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any, ClassVar, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_outbox.conf import rules
from django_outbox.conf.rules import (
    ByName,
    Choice,
    Delays,
    EventTypes,
    Flag,
    Group,
    Keyed,
    Names,
    Networks,
    Number,
    Origins,
    Parsed,
    Problem,
    Secret,
    Text,
    setting,
)
from django_outbox.lib import text
from django_outbox.lib.rate import Rate

T = TypeVar("T")

#: No number setting may exceed a year's seconds (keeps NaN and infinity out too).
MAX_NUMBER = 366 * 24 * 3600.0
#: The most a size limit may allow: bigger rows belong in files or object storage.
MAX_BYTES = 64 * 1024 * 1024
#: Most jobs per second a queue's rate may allow, and most requests per second an
#: endpoint's: buckets count time in seconds since the epoch, exact to about 0.2 µs, which
#: must stay a small part of a token's interval.
MAX_RATE = 10_000.0

WAKE_MODES = ("auto", "postgres", "redis", "poll")
RATE_LIMIT_STORES = ("auto", "redis", "database")

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


_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def parse_dotted_path(value: object) -> str:
    """'' or a dotted path to import, 'app.portal.tenant_for'; ValueError says what is wrong."""
    if value == "" or (isinstance(value, str) and _DOTTED.fullmatch(value)):
        return value
    raise ValueError(
        f"{value!r} is not a dotted path to a function: write 'module.function', e.g. "
        "'app.portal.tenant_for', or '' for none."
    )


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
class WebhookSettings:
    """``OUTBOX["WEBHOOKS"]``: how webhook deliveries are sent and retried."""

    check_id: ClassVar[str] = "django_outbox.E005"

    QUEUE: str = setting("webhooks", Text(), "The job queue deliveries run on.")
    BACKEND: str = setting("default", Text(), "The TASKS alias of the delivery jobs.")
    RETRY_SCHEDULE: tuple[float, ...] = setting(
        (0, 5, 300, 1800, 7200, 18000, 36000, 36000),
        Delays(MAX_NUMBER),
        "Seconds before each attempt, the first included (later ones: a draw below it).",
    )
    CONNECT_TIMEOUT: float = setting(5.0, Number(600, seconds=True), "Seconds to connect.")
    TIMEOUT: float = setting(
        15.0,
        Number(600, seconds=True),
        "Seconds for the whole request (an endpoint may set its own).",
    )
    ALLOWED_NETWORKS: tuple[str, ...] = setting(
        (), Networks(), "Networks (CIDR) deliveries may reach although not public: 10.0.0.0/8."
    )
    ALLOW_HTTP: bool = setting(False, Flag(), "Whether plain http:// endpoints are allowed.")
    LOOKUP_BATCH_SIZE: int = setting(
        50, Number(100, whole=True), "Most latest-attempt lookups that share one query."
    )
    LOOKUP_BATCH_WAIT_MS: float = setting(
        50.0, Number(10_000, floor_allowed=True), "Longest a lookup waits for others to share it."
    )
    MAX_PER_ENDPOINT: int = setting(
        10, Number(1000, whole=True), "Requests one worker process sends to one endpoint at once."
    )
    DISABLE_AFTER_SECONDS: float = setting(
        5 * 24 * 3600.0,
        Number(MAX_NUMBER, seconds=True),
        "An endpoint whose deliveries all failed for this long is disabled ...",
    )
    DISABLE_AFTER_ATTEMPTS: int = setting(
        20, Number(1_000_000, whole=True), "... once at least this many attempts in a row failed."
    )
    ROTATION_GRACE_SECONDS: float = setting(
        24 * 3600.0,
        Number(MAX_NUMBER, floor_allowed=True, seconds=True),
        "Seconds the previous secret keeps signing after a rotation.",
    )
    USER_AGENT: str = setting("django-outbox-webhooks", Text(), "The User-Agent header.")
    MAX_PAYLOAD_BYTES: int = setting(
        1024 * 1024,
        Number(MAX_BYTES, whole=True),
        "The largest a message's payload may be: the signed envelope, in bytes.",
    )
    EVENT_TYPES: dict[str, Any] = setting(
        {},
        EventTypes(),
        "The event-type catalogue: name -> description, example, optional JSON Schema.",
    )
    VALIDATE_PAYLOADS: bool | None = setting(
        None,
        Flag(none_says="None: validate when settings.DEBUG is on"),
        "Whether send() checks payloads against their event type's schema (None: DEBUG).",
    )
    # -- The portal and its API (docs/portal.md) ---------------------------------------
    PORTAL_TENANT: str = setting(
        "",
        Parsed(parse_dotted_path),
        "Dotted path of a function of the request that returns its tenant ('': none).",
    )
    PORTAL_SESSION_SECONDS: float = setting(
        8 * 3600.0,
        Number(MAX_NUMBER, seconds=True),
        "How long a portal session opened by a portal_url() link lasts.",
    )
    PORTAL_RATE: float = setting(
        20.0,
        Number(MAX_RATE),
        "Requests per second one tenant may make to the portal (API and pages), on average.",
    )
    PORTAL_BURST: int = setting(
        100, Number(100_000, whole=True), "... and at most this many at once after a lull."
    )
    PORTAL_FRAME_ANCESTORS: tuple[str, ...] = setting(
        (),
        Names("a list of origins ('https://app.example.com')"),
        "Origins whose pages may show the portal in an iframe (besides its own).",
    )


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """``OUTBOX["RETENTION"]``: what workers delete on their own, and how often."""

    check_id: ClassVar[str] = "django_outbox.E007"

    OLDER_THAN: str = setting(
        "7d", Parsed(parse_age), "Jobs finished, and messages created, this long ago go (7d, 12h)."
    )
    STATUSES: tuple[str, ...] = setting(
        FINISHED_STATUSES,
        Parsed(parse_statuses, listed=True),
        "The finished statuses of the jobs that go.",
    )
    EVERY_SECONDS: float = setting(
        3600.0,
        Number(MAX_NUMBER, seconds=True),
        "Seconds between two prunes by one worker (each starts at a random point).",
    )
    PARTITIONS: bool = setting(
        False,
        Flag(),
        "PostgreSQL: the job table is partitioned by day (outbox_partition), made ahead.",
    )

    @property
    def age(self) -> timedelta:
        return parse_age(self.OLDER_THAN)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """``OUTBOX["QUEUES"][name]``: limits on one queue, shared by every worker."""

    check_id: ClassVar[str] = "django_outbox.E006"

    concurrency: int | None = setting(
        None,
        Number(100_000, whole=True),
        "At most this many jobs of the queue run at once, across all workers.",
    )
    rate: float | None = setting(
        None, Number(MAX_RATE), "At most this many jobs of the queue start per second, on average."
    )
    burst: int | None = setting(
        None,
        Number(100_000, whole=True),
        "With rate: how many may start at once after a lull (default: a second's worth).",
    )

    @property
    def rate_limit(self) -> Rate | None:
        return None if self.rate is None else Rate.of(self.rate, self.burst)

    def conflicts(self, where: str) -> list[str]:
        """A burst without a rate; a queue that sets no limit."""
        found = []
        if self.burst is not None and self.rate is None:
            found.append(f"{where}['burst'] needs a 'rate' (jobs per second) to go with it.")
        if self.concurrency is None and self.rate is None:
            found.append(f"{where} must set 'concurrency', 'rate', or both.")
        return found


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """``OUTBOX["HEALTH"]``: what ``outbox_health`` and the health URL call unhealthy."""

    check_id: ClassVar[str] = "django_outbox.E008"

    QUEUES: tuple[str, ...] = setting(
        (),
        Names("a list of queue names"),
        "Queues that must have a live worker even when nothing is due.",
    )
    MAX_DUE_AGE_SECONDS: float = setting(
        300.0,
        Number(MAX_NUMBER, seconds=True),
        "The oldest due job may wait at most this long past its time.",
    )
    MAX_FAILURE_RATE: float = setting(
        0.5,
        Number(1, floor_allowed=True),
        "The failure rate of recently finished jobs may be at most this (0 to 1) ...",
    )
    WINDOW_SECONDS: float = setting(
        600.0,
        Number(MAX_NUMBER, seconds=True),
        "... among the jobs finished in this window (the latest 1,000 at most) ...",
    )
    MIN_FINISHED: int = setting(
        20, Number(1000, whole=True), "... once at least this many finished in it."
    )
    TOKEN: str = setting(
        "", Secret(min_length=16), "A bearer token the health URL accepts ('': staff only)."
    )


@dataclass(frozen=True, slots=True)
class PortalSettings:
    """``OUTBOX["PORTAL"]``: who may call the customer portal's API from a browser."""

    check_id: ClassVar[str] = "django_outbox.E011"

    CORS_ORIGINS: tuple[str, ...] = setting(
        (),
        Origins(),
        "Origins whose pages may call the tenant API from the browser (CORS), with a token.",
    )


#: The settings that are numbers of seconds above 0 at the top level (their sentences say
#: what is wrong, the type or the bounds, not both).
_SECONDS = Number(MAX_NUMBER, seconds=True, terse=True)


@dataclass(frozen=True, slots=True)
class OutboxSettings:
    """``OUTBOX``: the worker's timings, retries' defaults, and the groups above."""

    check_id: ClassVar[str] = "django_outbox.E001"

    POLL_INTERVAL: float = setting(
        1.0, _SECONDS, "Seconds between an idle worker's looks for due jobs without wake-ups."
    )
    WAKE: str = setting(
        "auto",
        Choice(WAKE_MODES),
        "How idle workers learn of new jobs: auto, postgres, redis, poll.",
    )
    REDIS_ALIAS: str = setting(
        "default",
        Text("a cache alias name"),
        "The django-redis cache alias for Redis wake-ups and rate limits.",
    )
    STALLED_CHECK_SECONDS: float = setting(
        30.0,
        _SECONDS,
        "With wake-ups: seconds between an idle worker's own looks, and lease rescues.",
    )
    LEASE_SECONDS: float = setting(
        30.0, _SECONDS, "Seconds a claimed job stays leased to its worker without a heartbeat."
    )
    HEARTBEAT_SECONDS: float = setting(
        10.0, _SECONDS, "Seconds between a worker's heartbeats (lease renewals, rescues)."
    )
    DEFAULT_MAX_ATTEMPTS: int = setting(
        3,
        Number(MAX_NUMBER, whole=True, terse=True),
        "Runs a job gets when its task does not say, the first included.",
    )
    BACKOFF_BASE: float = setting(
        1.0, _SECONDS, "Ceiling of the delay before the first retry (full jitter, doubling)."
    )
    BACKOFF_CAP: float = setting(3600.0, _SECONDS, "Largest ceiling of any retry delay.")
    WEBHOOKS: WebhookSettings = setting(
        WebhookSettings(), Group(WebhookSettings), "Webhook delivery: see WebhookSettings."
    )
    RETENTION: RetentionSettings | None = setting(
        None,
        Group(RetentionSettings, optional=True),
        "What workers prune (None: nothing unless outbox_prune is run).",
    )
    SCHEDULES: dict[str, Any] = setting(
        {},
        Keyed("a dict of schedules by name"),
        "Cron schedules by name (each checked in django_outbox.schedules).",
        check_id="django_outbox.E004",
    )
    QUEUES: dict[str, QueueSettings] = setting(
        {},
        ByName(QueueSettings, "a dict of queue settings by queue name"),
        "Limits per queue name (queues not listed have none).",
    )
    RATE_LIMIT_STORE: str = setting(
        "auto",
        Choice(RATE_LIMIT_STORES),
        "Where rate limits keep their buckets: auto, redis or database.",
    )
    MAX_ARGUMENTS_BYTES: int = setting(
        1024 * 1024,
        Number(MAX_BYTES, whole=True),
        "The largest a job's arguments may be, as stored JSON (args and kwargs together).",
    )
    HEALTH: HealthSettings = setting(
        HealthSettings(), Group(HealthSettings), "What outbox_health calls unhealthy."
    )
    PORTAL: PortalSettings = setting(
        PortalSettings(), Group(PortalSettings), "The customer portal's API from browsers."
    )

    def conflicts(self, where: str) -> list[str]:
        """Values each valid on its own that do not work together."""
        found = []
        lease = f"{where}['LEASE_SECONDS'] ({text.number(self.LEASE_SECONDS)})"
        if self.HEARTBEAT_SECONDS >= self.LEASE_SECONDS:
            found.append(
                f"{where}['HEARTBEAT_SECONDS'] ({text.number(self.HEARTBEAT_SECONDS)}) must be "
                f"shorter than {lease}, or leases expire between heartbeats."
            )
        if self.BACKOFF_CAP < self.BACKOFF_BASE:
            found.append(
                f"{where}['BACKOFF_CAP'] ({text.number(self.BACKOFF_CAP)}) must not be below "
                f"{where}['BACKOFF_BASE'] ({text.number(self.BACKOFF_BASE)})."
            )
        if self.WEBHOOKS.TIMEOUT >= self.LEASE_SECONDS:
            found.append(
                f"{where}['WEBHOOKS']['TIMEOUT'] ({text.number(self.WEBHOOKS.TIMEOUT)}) must "
                f"be shorter than {lease}, so a delivery's lease outlasts its request."
            )
        return found

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


def problems(raw: Any) -> list[Problem]:
    """Every problem with an ``OUTBOX`` value, each with its system check id."""
    return rules.group_problems(OutboxSettings, raw, "OUTBOX")


def settings_errors(raw: Any) -> list[str]:
    """Every problem with an ``OUTBOX`` value, as sentences; empty when it is valid."""
    return [problem.message for problem in problems(raw)]


def webhook_settings_errors(raw: Any) -> list[str]:
    """Every problem with an ``OUTBOX["WEBHOOKS"]`` value, as sentences."""
    found = rules.group_problems(WebhookSettings, raw, "OUTBOX['WEBHOOKS']")
    return [problem.message for problem in found]


def check_ids() -> dict[str, str]:
    """The id of the system check for each group of settings, by where the group is:
    ``{"OUTBOX": "django_outbox.E001", "OUTBOX['WEBHOOKS']": "django_outbox.E005", …}``."""
    return rules.check_ids(OutboxSettings, "OUTBOX")


def check_id(key: str) -> str:
    """The id of the system check that reports problems with ``OUTBOX[key]``."""
    ids = check_ids()
    return ids.get(f"OUTBOX[{key!r}]", ids["OUTBOX"])


def known_settings() -> set[str]:
    return set(OutboxSettings.__dataclass_fields__)


@cache
def get() -> OutboxSettings:
    """The validated settings, read once; raises ImproperlyConfigured when they are wrong."""
    raw = getattr(settings, "OUTBOX", {})
    errors = settings_errors(raw)
    if errors:
        raise ImproperlyConfigured(" ".join(errors))
    return rules.build(OutboxSettings, raw)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "OUTBOX":
        get.cache_clear()
