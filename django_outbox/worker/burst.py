"""When a burst worker (``runworker --burst``) with nothing in hand leaves.

It leaves once a last look finds nothing due. It stays while jobs it held back for a rate
limit fall due later, while due jobs wait for room in a limited queue, and while jobs wait
for the turn of a key whose job runs elsewhere (that worker may hand the next one on,
which signals nobody). It never leaves saying nothing is due when it could not look: after
BURST_TRIES failed looks it leaves with the reason, and exits non-zero.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from django_outbox.worker.database import Database
from django_outbox.worker.inbox import Inbox
from django_outbox.worker.producer import Producer

logger = logging.getLogger("django_outbox.worker")

#: Looks a burst worker makes for due jobs while the database is out of reach (backing off
#: 0.5, 1, 2, 4 … s) before it leaves with an error instead of calling the queues empty.
BURST_TRIES = 6
#: How often a burst worker with nothing in hand looks again while jobs of its queues wait
#: for a key whose job runs elsewhere.
HELD_LOOK_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Leave:
    """The worker leaves; ``cannot_claim``: why it could not tell that nothing is due."""

    cannot_claim: str | None = None


def look_last(
    worker_id: str,
    producer: Producer,
    db: Database,
    inbox: Inbox,
    read_pauses: Callable[[], None],
) -> Leave | None:
    """One more look for work, whatever the timer says: Leave, or None after waiting for
    what is still due (or after claiming some)."""
    producer.look_now()
    read_pauses()
    if producer.refill():
        return None
    now = time.monotonic()
    if db.failures:  # the look did not reach the database: nothing is known
        if db.failures < BURST_TRIES:
            inbox.wait(max(0.0, db.ok_after - now))
            return None
        why = f"the database failed {db.failures} looks in a row ({db.last_error})"
        logger.error(
            "worker %s: cannot look for due jobs: %s; leaving (burst) without knowing "
            "whether any are due",
            worker_id,
            why,
        )
        return Leave(cannot_claim=why)
    # Not before the next look is due; the whole poll when none is.
    pause = producer.next_look_in()
    poll = producer.poll_seconds
    pause = min(pause, poll) if pause > 0 else poll
    if producer.latest_held > now:
        # Jobs this worker held back for a rate limit are part of its work.
        inbox.wait(min(pause, producer.latest_held - now))
        return None
    if producer.due_behind_a_limit():
        # Due jobs wait for room or a token in a limited queue: wait, not leave.
        inbox.wait(pause)
        return None
    if producer.held_behind_a_running_key():
        # Jobs wait for their key's turn. The worker running the key's job may run the
        # next one itself, which signals nobody (jobs/handoff.py): look again soon.
        inbox.wait(min(pause, HELD_LOOK_SECONDS))
        return None
    logger.info("worker %s: nothing is due; leaving (burst)", worker_id)
    return Leave()
