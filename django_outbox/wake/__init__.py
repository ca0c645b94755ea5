"""Wake-ups: how idle workers learn of committed jobs without polling the database.

``OUTBOX["WAKE"]``: "postgres" (LISTEN/NOTIFY), "redis" (markers in Redis through
django-redis), "poll" (none), or "auto": PostgreSQL when the database is PostgreSQL and its
probe passes, else Redis when the django-redis cache ``OUTBOX["REDIS_ALIAS"]`` exists, else
polling. Polling stays the safety net in every mode.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django_outbox import conf
from django_outbox.db import dialect
from django_outbox.wake.base import Sender, Statement, Wake, Waker
from django_outbox.wake.polling import PollingWaker
from django_outbox.wake.senders import build_sender, redis_configured

__all__ = [
    "Sender",
    "Wake",
    "Waker",
    "build_sender",
    "build_waker",
    "choice_reason",
    "redis_configured",
]

logger = logging.getLogger("django_outbox.wake")


def choice_reason(using: str) -> str:
    """Why ``OUTBOX["WAKE"]`` picks the channels it does for the database ``using``, in
    words, for the worker's start line and the system check."""
    options = conf.get()
    if options.WAKE != "auto":
        return f"WAKE={options.WAKE!r}"
    database = "LISTEN/NOTIFY" if dialect(using).listen_notify else "no LISTEN/NOTIFY"
    alias = options.REDIS_ALIAS
    cache = (
        f"CACHES[{alias!r}] is django-redis"
        if redis_configured(alias)
        else f"no django-redis cache CACHES[{alias!r}]"
    )
    return f"WAKE='auto': database {using!r} has {database}, {cache}"


def build_waker(
    queues: list[str], stop: threading.Event, using: str, alive: Statement | None = None
) -> Waker:
    """The waker a worker on ``using`` should use, already started (listening).

    ``alive`` builds the worker's "alive" update, which a PostgreSQL listener sends as its
    heartbeat (one statement instead of two).

    A channel that is down at start is kept and retried (the worker polls meanwhile); only
    a channel that cannot work here, such as LISTEN behind a transaction-mode PgBouncer,
    is given up for the next candidate, and in the end for polling.
    """
    options = conf.get()
    mode = options.WAKE
    candidates: list[Callable[[], Waker]] = []
    if mode in ("postgres", "auto") and dialect(using).listen_notify:
        from django_outbox.wake.postgres import PostgresWaker

        candidates.append(lambda: PostgresWaker(queues, stop, using=using, alive=alive))
    if mode == "redis" or (mode == "auto" and redis_configured(options.REDIS_ALIAS)):
        from django_outbox.wake.redis import RedisWaker

        candidates.append(lambda: RedisWaker(queues, stop, using=using))
    for make in candidates:
        waker: Waker | None = None
        try:
            waker = make()
            waker.start()
        except Exception as exc:  # a broken channel must not stop the worker starting
            name = waker.name if waker is not None else "a wake-up channel"
            logger.warning("wake-ups: %s failed to start (%s)", name, exc)
            if waker is not None:
                waker.close()
            continue
        if waker.active or waker.will_retry:
            return waker
        waker.close()
    if candidates:
        logger.warning("no wake-up channel works (WAKE=%r): polling", mode)
    elif mode != "poll":
        logger.info("wake-ups: none configured (WAKE=%r); polling", mode)
    polling = PollingWaker(queues, stop)
    polling.start()
    return polling
