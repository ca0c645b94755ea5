"""What the worker's services tell the worker. A service posts an event (``post(event)``)
and the worker acts on it at once, on its main thread (``Worker.on`` in loop.py): no
service calls another, and the worker is the one place that knows who acts on what."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django_outbox.jobs.types import ClaimedJob


@dataclass(frozen=True, slots=True)
class Requeued:
    """A job this worker put back falls due at ``when`` (a rate limit held it: ``held``);
    the producer looks again then."""

    when: datetime
    held: bool = False


@dataclass(frozen=True, slots=True)
class SlotsFreed:
    """A completion freed slots of limited queues, per queue."""

    freed: Counter[str]


@dataclass(frozen=True, slots=True)
class Handed:
    """A completion handed this worker the next jobs of the keys it ended
    (jobs/handoff.py): they run as if claimed."""

    jobs: list[ClaimedJob]


@dataclass(frozen=True, slots=True)
class FoundWork:
    """Maintenance put jobs back in the queue (a rescue, a sweep): they are due now."""


@dataclass(frozen=True, slots=True)
class Orphaned:
    """The supervising process is gone."""


Event = Requeued | SlotsFreed | Handed | FoundWork | Orphaned
Post = Callable[[Event], None]
