"""How the worker's services call the database: on an error, log, drop the connection and
back off, returning None. The database is the truth: nothing is lost, the next try picks up
where this one left off. A deadlock is no fault: the database undid one of two transactions
that waited on each other, and the operation runs again at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.db import Error as DatabaseErrors
from django.db import InterfaceError, OperationalError, connections

from django_outbox.db.reachability import first_line
from django_outbox.db.retries import again_after_deadlocks

logger = logging.getLogger("django_outbox.worker")

#: Runs of an operation whose transaction the database undid for a deadlock, in a row.
DEADLOCK_TRIES = 3


class Database:
    """The worker's main connection, shared by its producer, completer and maintenance."""

    def __init__(self, worker_id: str, alias: str, lease_seconds: float, stats: Any) -> None:
        self.worker_id = worker_id
        #: The worker's WorkerStats: its ``statements`` counts the main connection's.
        self.stats = stats
        self.alias = alias
        #: Heartbeats wait too: the pause stays well inside a lease, so the jobs this
        #: worker runs are not taken back while the database is briefly away.
        self.longest_pause = min(10.0, lease_seconds / 4)
        #: No statement before this moment (monotonic): the database failed just now.
        self.ok_after = 0.0
        self.failures = 0
        #: The last failure, "OperationalError: …" (its first line).
        self.last_error = ""

    @property
    def away(self) -> bool:
        return time.monotonic() < self.ok_after

    def run(self, operation: Callable[[], Any], refused_raises: bool = False) -> Any:
        """Run ``operation``; None when the database is away (now, or just before).

        ``refused_raises``: an error from a database that answered and said no (not a
        lost connection) is raised for the caller to deal with."""
        now = time.monotonic()
        if now < self.ok_after:
            return None
        try:
            value = self._again_after_deadlocks(operation)
        except DatabaseErrors as exc:
            if refused_raises and not isinstance(exc, OperationalError | InterfaceError):
                raise
            self.failures += 1
            pause = min(self.longest_pause, 0.5 * 2 ** min(self.failures - 1, 5))
            self.ok_after = now + pause
            self.last_error = first_line(exc)
            logger.warning(
                "worker %s: database error (%s); retrying in %.1f s",
                self.worker_id,
                self.last_error,
                pause,
            )
            connections[self.alias].close()
            return None
        if self.failures:
            logger.info("worker %s: database reachable again", self.worker_id)
            self.failures = 0
        return value

    def _again_after_deadlocks(self, operation: Callable[[], Any]) -> Any:
        """``operation``'s value; run again where the database undid its transaction for a
        deadlock (InnoDB picks one of two transactions updating rows through the same
        indexes; every operation here is one transaction, or several that each stand alone)."""
        return again_after_deadlocks(
            self.alias,
            operation,
            DEADLOCK_TRIES,
            lambda exc: logger.debug(
                "worker %s: deadlock (%s); running again", self.worker_id, exc
            ),
        )

    def count_statement(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        """An execute_wrapper for the main connection."""
        self.stats.statements += 1
        return execute(sql, params, many, context)
