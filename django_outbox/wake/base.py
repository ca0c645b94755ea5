"""The wake-up seam: how idle workers learn that work was committed.

Signals are hints, the database is the truth: a lost signal costs latency (the worker's
own periodic look finds the job), never a job. So every sender swallows its errors, and
every waiter falls back to polling when its channel fails.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Builds a statement and its parameters, to run on a connection Django does not manage.
Statement = Callable[[], tuple[str, tuple[Any, ...]]]


@dataclass(slots=True)
class Wake:
    """What a wait returned: whether to look for work now, and due times learned."""

    look_now: bool = False
    #: Epoch seconds of the earliest delayed job a signal told of, if any.
    next_due: float | None = None
    queues: set[str] = field(default_factory=set)


class Sender(ABC):
    """The enqueueing side: tells workers that ``queues`` have jobs due at given times."""

    name: str = "none"

    @abstractmethod
    def send(self, queues: dict[str, float]) -> None:
        """``queues`` maps a queue to the epoch second its earliest new job is due."""


class Waker(ABC):
    """The worker side: waits for a signal, or until the timeout, or until stopped."""

    name: str = "poll"

    def __init__(self, queues: list[str], stop: threading.Event) -> None:
        self.queues = list(queues)
        self.stop = stop
        #: Statements sent to the jobs' database on the waker's own connection, if any.
        self.statements = 0

    @property
    def active(self) -> bool:
        """True while signals can arrive (a worker then polls only as a safety net)."""
        return False

    @property
    def will_retry(self) -> bool:
        """True when the channel is down for now and will be tried again."""
        return False

    #: True when taking a signal takes it from every other worker (one Redis marker wakes
    #: one worker): such a channel is waited on only while the worker has room for work.
    exclusive: bool = False

    @property
    def reports_alive(self) -> bool:
        """True while the waker's own heartbeat keeps the worker's registry row current."""
        return False

    def start(self) -> None:  # noqa: B027  (optional hook)
        """Begin listening; called before the worker's first look for work."""

    @abstractmethod
    def wait(self, timeout: float) -> Wake: ...

    def more_remain(self, queue: str) -> None:  # noqa: B027  (optional hook)
        """The worker took a full batch from ``queue``: wake another worker (Redis)."""

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Stop listening."""
