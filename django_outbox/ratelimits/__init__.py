"""Rate limits shared by every worker: token buckets in Redis or in the database.

Each bucket is kept the way GCRA (the generic cell rate algorithm) keeps it: one number per
bucket, the time at which it would be full again, moved forward by one interval per token
given. Reading and moving it is one atomic step (a Lua script in Redis, one upsert
statement in the database), so workers on many machines share a bucket without a lock.

Two ways to ask:

- ``take(key, rate, wanted)`` gives up to ``wanted`` tokens now, or none and how long until
  the next one. Queue limits use it before they claim: held-back jobs stay queued, in
  their place, and nothing is charged for them.
- ``reserve(key, rate)`` always charges one token and says how long until its turn.
  Endpoint limits use it: a delivery over the limit waits for its own turn, so a backlog
  spreads out at the rate instead of every delivery asking again at every token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from django_outbox import conf
from django_outbox.lib.rate import Rate

T = TypeVar("T")

__all__ = ["Grant", "Rate", "give_back", "next_token_at", "reserve", "store_name", "take"]

logger = logging.getLogger("django_outbox.ratelimits")

#: After Redis fails, buckets live in the database for this long before Redis is tried again.
REDIS_PAUSE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Grant:
    #: Tokens given, from 0 to what was asked.
    granted: int
    #: When fewer were given than asked: seconds until the next token (else 0).
    retry_in: float


class Store(Protocol):
    def take(self, key: str, rate: Rate, wanted: int) -> tuple[int, float, float]:
        """Give up to ``wanted`` tokens: (given, the bucket's new full time, now)."""

    def reserve(self, key: str, rate: Rate) -> tuple[float, float]:
        """Charge one token: (the bucket's new full time, now)."""

    def give_back(self, key: str, rate: Rate, count: int) -> None: ...

    def full_at(self, key: str) -> float:
        """When the bucket is full again, in seconds since the epoch (0: it is full)."""


def take(key: str, rate: Rate, wanted: int) -> Grant:
    """Up to ``wanted`` tokens of the bucket ``key`` now."""
    if wanted < 1:
        return Grant(0, 0.0)
    granted, full_at, now = _call(lambda store: store.take(key, rate, wanted))
    if granted >= wanted:
        return Grant(granted, 0.0)
    # The next token is free once the bucket has room for one more.
    return Grant(granted, max(0.0, full_at + rate.interval - rate.capacity - now))


def reserve(key: str, rate: Rate) -> float:
    """Charge one token of the bucket ``key``; seconds until it may be used (0: now)."""
    full_at, now = _call(lambda store: store.reserve(key, rate))
    wait = full_at - rate.capacity - now
    # A wait far below one interval is float rounding, not a turn to wait for.
    return wait if wait > 0.01 * rate.interval else 0.0


def next_token_at(key: str, rate: Rate) -> float | None:
    """When the bucket ``key`` next has a token, in seconds since the epoch; None: it has
    one now. Takes nothing: for showing, not for deciding."""
    at = _call(lambda store: store.full_at(key)) + rate.interval - rate.capacity
    return at if at > time.time() else None


def give_back(key: str, rate: Rate, count: int) -> None:
    """Return ``count`` tokens taken and not used (a claim found fewer jobs than tokens)."""
    if count > 0:
        _call(lambda store: store.give_back(key, rate, count))


def store_name() -> str:
    """Where buckets live now: "redis" or "database"."""
    option = conf.get().RATE_LIMIT_STORE
    if option == "auto":
        from django_outbox.wake import redis_configured

        option = "redis" if redis_configured(conf.get().REDIS_ALIAS) else "database"
    if option == "redis" and time.monotonic() < _redis_down_until:
        return "database"
    return option


_redis_down_until = 0.0


def _call(operation: Callable[[Store], T]) -> T:
    global _redis_down_until
    if store_name() == "redis":
        from django_outbox.ratelimits import redis

        try:
            return operation(redis.RedisStore(conf.get().REDIS_ALIAS))
        except Exception as exc:  # Redis is down or refused: the database stands in
            _redis_down_until = time.monotonic() + REDIS_PAUSE_SECONDS
            logger.warning(
                "rate limits: Redis failed (%s: %s); using the database for %.0f s",
                type(exc).__name__,
                exc,
                REDIS_PAUSE_SECONDS,
            )
    from django_outbox.ratelimits import database

    return operation(database.DatabaseStore())
