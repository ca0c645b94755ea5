"""Wake-ups through PostgreSQL LISTEN/NOTIFY.

Senders run ``SELECT pg_notify(channel, payload)`` on their own connection once their
transaction has committed. Each worker process keeps one extra connection, opened with
psycopg from the Django settings but outside Django's connection handling, that LISTENs on
one channel per queue. At start a probe notification must come back within 2 s (through a
transaction-mode PgBouncer it does not); if it does not, the worker says so once and polls.
The connection is tested every 10 s with a heartbeat statement (the worker's "alive" update
when the worker gives one, else ``SELECT 1``; TCP timeouts and a statement timeout bound it to
about 5 s) and replaced when it fails; after any reconnect the worker looks for work at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import threading
import time
import uuid
from typing import Any

import psycopg
from django.db import connections
from psycopg import sql

from django_outbox.db import named
from django_outbox.wake.base import Sender, Statement, Wake, Waker

logger = logging.getLogger("django_outbox.wake")

PROBE_SECONDS = 2.0
HEARTBEAT_SECONDS = 10.0
CONNECT_SECONDS = 5
#: Longest single wait, so a stop request is seen promptly.
CHUNK_SECONDS = 0.25
#: PostgreSQL truncates identifiers longer than this many bytes.
MAX_CHANNEL_BYTES = 63


def channel_for(queue: str) -> str:
    """The channel of a queue; names too long for PostgreSQL are hashed, never truncated."""
    name = f"outbox.{queue}"
    if len(name.encode()) <= MAX_CHANNEL_BYTES:
        return name
    return "outbox.h." + hashlib.sha256(queue.encode()).hexdigest()[:40]


def payload_for(queue: str, due: float) -> str:
    return json.dumps({"q": queue, "at": round(due, 3)})


def read_payload(text: str, queues: set[str]) -> tuple[str, float] | None:
    """(queue, due) from a payload we sent; None for anything else (never an error)."""
    try:
        data = json.loads(text)
        queue, due = data["q"], float(data["at"])
    except Exception:  # anything at all: a stranger's NOTIFY must never stop a worker
        return None
    if not isinstance(queue, str) or queue not in queues or not math.isfinite(due):
        return None
    return queue, due


class PostgresSender(Sender):
    name = "postgres"

    def __init__(self, using: str) -> None:
        self.using = using

    def send(self, queues: dict[str, float]) -> None:
        calls = ", ".join(["pg_notify(%s, %s)"] * len(queues))
        params = [p for q, due in queues.items() for p in (channel_for(q), payload_for(q, due))]
        with connections[self.using].cursor() as cursor:
            cursor.execute(named("wake", f"SELECT {calls}"), params)


def plain_params(using: str) -> dict[str, Any]:
    """psycopg.connect() keywords for the database ``using``, as Django builds them, less
    what only Django's own connections take."""
    params = dict(connections[using].get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold", "pool"):
        params.pop(django_only, None)
    return params


def listener_params(using: str) -> dict[str, Any]:
    """psycopg.connect() keywords for the database ``using``, with timeouts that bound a
    dead network to seconds."""
    params = plain_params(using)
    params.update(
        autocommit=True,
        connect_timeout=CONNECT_SECONDS,
        keepalives=1,
        keepalives_idle=5,
        keepalives_interval=2,
        keepalives_count=2,
        tcp_user_timeout=5000,
        application_name="django_outbox listener",
    )
    # A server that accepts but does not answer must not hold LISTEN, the probe or the
    # heartbeat for ever: each statement gets the same deadline as a connection.
    params["options"] = (
        f"{params.get('options', '')} -c statement_timeout={CONNECT_SECONDS}s".strip()
    )
    return params


class PostgresWaker(Waker):
    name = "postgres"

    def __init__(
        self,
        queues: list[str],
        stop: threading.Event,
        using: str = "default",
        alive: Statement | None = None,
    ) -> None:
        super().__init__(queues, stop)
        self.using = using
        #: Builds the heartbeat statement; None: ``SELECT 1``.
        self.alive = alive
        self._queue_set = set(queues)
        self._conn: psycopg.Connection[Any] | None = None
        self._usable = False
        self._retry_at = 0.0
        self._failures = 0
        self._last_heartbeat = 0.0
        self._look_first = False

    @property
    def active(self) -> bool:
        return self._usable and self._conn is not None

    @property
    def will_retry(self) -> bool:
        return self._usable and self._conn is None

    def start(self) -> None:
        if not self._connect():
            self._usable = True  # the server is away: retry it; the probe waits till then
            return
        if self._probe():
            self._usable = True
            logger.info("wake-ups: listening on PostgreSQL for %s", ", ".join(self.queues))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    # -- connection ------------------------------------------------------------------

    def _connect(self) -> bool:
        self.close()
        try:
            conn = psycopg.connect(**listener_params(self.using))
            for queue in self.queues:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_for(queue))))
        except psycopg.Error as exc:
            self._failed(f"could not listen ({type(exc).__name__}: {str(exc).strip()})")
            return False
        self._conn = conn
        self._failures = 0
        self._last_heartbeat = time.monotonic()
        return True

    def _failed(self, why: str) -> None:
        self.close()
        self._failures += 1
        pause = min(30.0, 0.5 * 2 ** min(self._failures - 1, 6))
        self._retry_at = time.monotonic() + pause
        logger.warning("wake-ups: %s; polling, next try in %.1f s", why, pause)

    def _probe_channels(self) -> tuple[str, str]:
        """The channel the probe listens on, and the one it sends to: the same, unless a
        test wants to see what happens when notifications never arrive."""
        channel = f"outbox.probe.{uuid.uuid4().hex[:16]}"
        return channel, channel

    def _probe(self) -> bool:
        """Send a notification the way senders do; see that it arrives within 2 s."""
        assert self._conn is not None
        channel, send_to = self._probe_channels()
        arrived = False
        try:
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            with connections[self.using].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [send_to, "probe"])
            deadline = time.monotonic() + PROBE_SECONDS
            while not arrived and (left := deadline - time.monotonic()) > 0:
                for note in self._conn.notifies(timeout=left, stop_after=1):
                    if note.channel == channel:
                        arrived = True
                    else:  # a queue's signal, meanwhile: look for work once started
                        self._look_first = True
            self._conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
        except Exception as exc:  # psycopg's or Django's: either way, no wake-ups yet
            # Given up, not retried (the worker tries the next channel, or polls): say so.
            self.close()
            logger.warning(
                "wake-ups: the LISTEN probe failed (%s: %s); not using PostgreSQL wake-ups",
                type(exc).__name__,
                exc,
            )
            return False
        if not arrived:
            logger.warning(
                "wake-ups: a probe NOTIFY did not come back within %.0f s (a PgBouncer in "
                "transaction mode?); polling instead. Use OUTBOX['WAKE'] = 'redis', or "
                "connect workers to PostgreSQL directly.",
                PROBE_SECONDS,
            )
            self.close()
        return arrived

    # -- waiting ---------------------------------------------------------------------

    def wait(self, timeout: float) -> Wake:
        deadline = time.monotonic() + max(0.0, timeout)
        wake = Wake(look_now=self._look_first)
        self._look_first = False
        if wake.look_now:
            return wake
        first = True  # with timeout 0, still read what has arrived (a glance)
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= deadline and not first:
                break
            first = False
            if self._conn is None:
                if self._usable and now >= self._retry_at and self._connect():
                    logger.info("wake-ups: listening again on PostgreSQL")
                    return Wake(look_now=True)  # signals may have been missed meanwhile
                self.stop.wait(max(0.0, min(CHUNK_SECONDS, deadline - now)))
                continue
            if now - self._last_heartbeat >= HEARTBEAT_SECONDS and not self._heartbeat():
                return Wake(look_now=True)
            try:
                self._read(max(0.0, min(CHUNK_SECONDS, deadline - now)), wake)
            except psycopg.Error as exc:
                self._failed(f"the LISTEN connection failed ({type(exc).__name__})")
                return Wake(look_now=True)
            if wake.look_now or wake.next_due is not None:
                break
        return wake

    def _read(self, timeout: float, wake: Wake) -> None:
        assert self._conn is not None
        notes = list(self._conn.notifies(timeout=timeout, stop_after=1))
        if notes:
            notes += list(self._conn.notifies(timeout=0.0))
        now = time.time()
        for note in notes:
            parsed = read_payload(note.payload, self._queue_set)
            if parsed is None:
                continue
            queue, due = parsed
            wake.queues.add(queue)
            if due <= now + 0.001:
                wake.look_now = True
            else:
                wake.next_due = due if wake.next_due is None else min(wake.next_due, due)

    @property
    def reports_alive(self) -> bool:
        return self.active and self.alive is not None

    def _heartbeat(self) -> bool:
        """Test the connection every 10 s; with ``alive``, its statement says the worker is
        alive at the same time, so an idle worker's main connection need not."""
        assert self._conn is not None
        statement, params = self.alive() if self.alive else ("SELECT 1", ())
        self.statements += 1
        try:
            self._conn.execute(statement, params)
        except psycopg.Error as exc:
            self._failed(f"the LISTEN connection did not answer ({type(exc).__name__})")
            return False
        self._last_heartbeat = time.monotonic()
        return True
