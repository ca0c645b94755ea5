"""Wake-ups through Redis, via django-redis (works with SQLite too).

A commit adds a marker to its queue's sorted set; idle workers wait with ``BZPOPMIN`` on
their queues' sets, so one marker wakes one worker, and a worker that takes a full batch
puts a marker back to wake the next. Delayed jobs leave their due time in a second set
(one member, the earliest time), which idle workers read to sleep until then. Keys carry
the cache's key prefix and the database name. Redis being down or refusing a command
never fails an enqueue; a worker then polls and says so once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.core.cache import caches

from django_outbox.wake.base import Sender, Wake, Waker

logger = logging.getLogger("django_outbox.wake")

#: Longest single BZPOPMIN, so a stop request is seen promptly.
CHUNK_SECONDS = 1.0
#: Seconds between reads of the delayed-job markers while idle.
DUE_READ_SECONDS = 5.0


def _client(alias: str) -> Any:
    from django_redis import get_redis_connection

    return get_redis_connection(alias)


def key_for(alias: str, using: str, queue: str, delayed: bool = False) -> str:
    prefix = caches[alias].key_prefix or ""
    database = settings.DATABASES[using]["NAME"]
    return f"{prefix}:django_outbox:{database}:{queue}" + (":later" if delayed else "")


def socket_timeout(alias: str) -> float | None:
    """The cache's SOCKET_TIMEOUT, if it sets one: a blocking wait must stay below it."""
    value = settings.CACHES.get(alias, {}).get("OPTIONS", {}).get("SOCKET_TIMEOUT")
    return float(value) if isinstance(value, int | float) and value > 0 else None


#: After a failed send, commits skip Redis this long rather than each wait on it.
SENDER_PAUSE_SECONDS = 5.0


class RedisSender(Sender):
    name = "redis"

    def __init__(self, alias: str, using: str) -> None:
        self.alias = alias
        self.using = using
        self._paused_until = 0.0

    def send(self, queues: dict[str, float]) -> None:
        if time.monotonic() < self._paused_until:
            return  # Redis failed a moment ago: workers poll meanwhile
        try:
            self._send(queues)
        except Exception:
            self._paused_until = time.monotonic() + SENDER_PAUSE_SECONDS
            raise

    def _send(self, queues: dict[str, float]) -> None:
        now = time.time()
        pipe = _client(self.alias).pipeline(transaction=False)
        for queue, due in queues.items():
            if due > now + 0.001:  # keep the earliest due time, for workers that come later
                later = key_for(self.alias, self.using, queue, delayed=True)
                pipe.zadd(later, {"next": due}, lt=True)
            # Wake one worker either way: it looks, and learns when the next job falls due.
            pipe.zadd(key_for(self.alias, self.using, queue), {"wake": 0})
        pipe.execute()


class RedisWaker(Waker):
    name = "redis"
    exclusive = True

    def __init__(self, queues: list[str], stop: threading.Event, using: str = "default") -> None:
        super().__init__(queues, stop)
        from django_outbox import conf

        self.alias = conf.get().REDIS_ALIAS
        self.using = using
        self._keys = [key_for(self.alias, using, q) for q in queues]
        self._later = [key_for(self.alias, using, q, delayed=True) for q in queues]
        self._up = False
        self._said_down = False
        self._retry_at = 0.0
        self._next_due_read = 0.0
        limit = socket_timeout(self.alias)
        self._chunk = min(CHUNK_SECONDS, limit * 0.5) if limit else CHUNK_SECONDS

    @property
    def active(self) -> bool:
        return self._up

    def start(self) -> None:
        try:
            _client(self.alias).ping()
        except Exception as exc:
            self._down(exc)
            return
        self._up = True
        logger.info("wake-ups: waiting on Redis (%s) for %s", self.alias, ", ".join(self.queues))

    def _down(self, exc: BaseException) -> None:
        self._up = False
        self._retry_at = time.monotonic() + 5.0
        if not self._said_down:
            logger.warning(
                "wake-ups: Redis (%s) is unreachable or refused a command (%s: %s); polling "
                "until it answers",
                self.alias,
                type(exc).__name__,
                exc,
            )
            self._said_down = True

    @property
    def will_retry(self) -> bool:
        return not self._up

    def wait(self, timeout: float) -> Wake:
        if timeout <= 0:
            return self._glance()
        deadline = time.monotonic() + timeout
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                return Wake()
            if not self._up:
                if now >= self._retry_at and self._reconnect():
                    return Wake(look_now=True)  # markers may have been lost meanwhile
                self.stop.wait(min(0.25, deadline - now))
                continue
            try:
                wake = self._wait_once(min(self._chunk, deadline - now))
            except Exception as exc:
                self._down(exc)
                return Wake(look_now=True)
            if wake.look_now or wake.next_due is not None:
                return wake
        return Wake()

    def _glance(self) -> Wake:
        """Take a marker if one is there, without waiting."""
        if not self._up:
            return Wake()
        try:
            pipe = _client(self.alias).pipeline(transaction=False)
            for key in self._keys:
                pipe.zpopmin(key)
            return Wake(look_now=any(pipe.execute()))
        except Exception as exc:
            self._down(exc)
            return Wake(look_now=True)

    def _wait_once(self, timeout: float) -> Wake:
        client = _client(self.alias)
        now = time.monotonic()
        if now >= self._next_due_read:
            self._next_due_read = now + DUE_READ_SECONDS
            wake = self._read_due(client)
            if wake.look_now or wake.next_due is not None:
                return wake
        popped = client.bzpopmin(self._keys, timeout=max(0.01, timeout))
        if popped and self.stop.is_set():
            # Stopping: this worker will not look, so leave the marker for another one.
            client.zadd(popped[0], {popped[1]: popped[2]})
            return Wake()
        if popped:
            self._next_due_read = 0.0  # after this look, learn when delayed jobs fall due
        return Wake(look_now=bool(popped))

    def _read_due(self, client: Any) -> Wake:
        pipe = client.pipeline(transaction=False)
        for key in self._later:
            pipe.zrange(key, 0, 0, withscores=True)
        wake = Wake()
        wall = time.time()
        for key, rows in zip(self._later, pipe.execute(), strict=True):
            for _member, due in rows:
                if due <= wall:
                    client.zrem(key, "next")
                    wake.look_now = True
                else:
                    wake.next_due = due if wake.next_due is None else min(wake.next_due, due)
        return wake

    def _reconnect(self) -> bool:
        try:
            _client(self.alias).ping()
        except Exception as exc:
            self._retry_at = time.monotonic() + 5.0
            logger.debug("wake-ups: Redis still unreachable: %s", exc)
            return False
        self._up = True
        self._said_down = False
        logger.info("wake-ups: Redis (%s) answers again", self.alias)
        return True

    def more_remain(self, queue: str) -> None:
        if not self._up:
            return
        try:
            _client(self.alias).zadd(key_for(self.alias, self.using, queue), {"wake": 0})
        except Exception as exc:
            self._down(exc)
