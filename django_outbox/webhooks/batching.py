"""Gathering calls made at the same time on different threads into one batch.

Deliveries run on the worker's threads, one each. When several run at once, their lookups
(and their writes) go to the database as one statement: the first caller of a batch waits
while others keep arriving, and runs the batch for all once it is full, once a short lull
says no one else is coming, or once the longest wait is over. A lone caller waits only
for the lull.

Why wait at all, rather than run at once and gather only while a batch runs (group
commit)? A batch's statements hold the GIL while they are built and their results read,
so few callers get anywhere while one runs: batches stayed at two or three, and their
fixed cost per call tripled (a third of the deliveries per second, measured).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

#: No newcomer for this long ends the gathering: the threads a claim started arrive
#: within a millisecond or two of each other.
LULL_SECONDS = 0.005

Key = TypeVar("Key")
Value = TypeVar("Value")


@dataclass
class _Batch(Generic[Key]):
    keys: list[Key] = field(default_factory=list)
    full: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    results: list[Any] = field(default_factory=list)
    error: BaseException | None = None


class Batcher(Generic[Key, Value]):
    """``submit(key)`` blocks until ``run(keys)`` has run for the batch holding ``key``.

    ``run`` returns one value per key, in order; if it raises, every caller in the batch
    gets the exception (each then deals with it on its own). ``lull`` None: gather for the
    whole ``wait`` unless the batch fills.
    """

    def __init__(
        self,
        run: Callable[[list[Key]], Sequence[Value]],
        size: Callable[[], int],
        wait: Callable[[], float],
        lull: float | None = LULL_SECONDS,
    ) -> None:
        self._run = run
        self._size = size
        self._wait = wait
        self._lull = lull
        self._lock = threading.Lock()
        self._open: _Batch[Key] | None = None
        #: Batches run so far (benchmarks and tests read it).
        self.batches = 0

    def submit(self, key: Key) -> Value:
        with self._lock:
            batch = self._open
            leader = batch is None
            if batch is None:
                batch = self._open = _Batch()
            position = len(batch.keys)
            batch.keys.append(key)
            if len(batch.keys) >= self._size():
                self._open = None  # full: the next caller starts another
                batch.full.set()
        if not leader:
            batch.done.wait()
        else:
            self._gather(batch)
            try:
                batch.results = list(self._run(batch.keys))
            except BaseException as exc:
                batch.error = exc
            finally:
                self.batches += 1
                batch.done.set()
        if batch.error is not None:
            raise batch.error
        value: Value = batch.results[position]
        return value

    def _gather(self, batch: _Batch[Key]) -> None:
        """Wait until the batch is full, or ``wait`` is over, or (with a lull) no one
        arrived during the last lull. Arrivals are counted, not signalled: a signal per
        arrival cost the leader a wake-up each, and the arriving thread a notify."""
        deadline = time.monotonic() + self._wait()
        seen = -1
        while not batch.full.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if self._lull is None:
                batch.full.wait(left)
                break
            if len(batch.keys) == seen:
                break  # a lull: no one else is coming
            seen = len(batch.keys)
            batch.full.wait(min(self._lull, left))
        with self._lock:
            if self._open is batch:
                self._open = None
