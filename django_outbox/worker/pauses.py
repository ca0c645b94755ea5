"""Which of the worker's queues are paused (django_outbox.queues), read at most once a second.

The loop asks before a claim: the state is read again when the last read is older than
``REFRESH_SECONDS``, so a pause takes effect within a second, at the cost of one small
query per second at most (none while the worker neither claims nor has a paused queue).
Only the running queues go to the claim; jobs already claimed run on. While a queue is
paused the loop comes back every ``REFRESH_SECONDS`` to read again, so a resume is seen
within a second even when its wake-up signal is lost.
"""

from __future__ import annotations

import logging

from django_outbox import queues
from django_outbox.worker.database import Database

logger = logging.getLogger("django_outbox.worker")

#: Longest the worker goes on a read of the paused queues before claiming.
REFRESH_SECONDS = 1.0


class Pauses:
    def __init__(self, worker_id: str, queues: list[str], db: Database) -> None:
        self.worker_id = worker_id
        self.queues = list(queues)
        self.db = db
        #: The worker's queues that were paused at the last read.
        self.paused: frozenset[str] = frozenset()
        #: The next read is due then (monotonic); 0: before the first claim.
        self._next_read = 0.0

    @property
    def running(self) -> list[str]:
        """The worker's queues to claim from: the ones not paused, in the worker's order."""
        return [queue for queue in self.queues if queue not in self.paused]

    def stale(self, now: float) -> bool:
        return now >= self._next_read

    def due_at(self) -> float:
        """When the loop must come back to read again (monotonic): only while a queue is
        paused (inf otherwise: the next claim reads first when the state is stale)."""
        return self._next_read if self.paused else float("inf")

    def refresh(self, now: float) -> bool:
        """Read the state again; True when a queue was resumed since the last read. When
        the database is away, what was known last holds (and is read again in a second)."""
        self._next_read = now + REFRESH_SECONDS
        found = self.db.run(lambda: queues.paused(self.queues))
        if found is None:
            return False
        before, self.paused = self.paused, frozenset(found)
        stopped, resumed = self.paused - before, before - self.paused
        if stopped:
            logger.info(
                "worker %s: queue(s) %s paused; claiming from them no more (running jobs finish)",
                self.worker_id,
                ", ".join(sorted(stopped)),
            )
        if resumed:
            logger.info(
                "worker %s: queue(s) %s resumed", self.worker_id, ", ".join(sorted(resumed))
            )
        return bool(resumed)
