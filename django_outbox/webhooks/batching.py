"""Gathering calls made at the same time on different threads into one batch.

Deliveries run on the worker's threads, one each. When several run at once, their lookups
(and their writes) wait a moment for each other and go to the database as one statement:
the first caller of a batch waits until the batch is full, until every delivery now
running has joined, or until the wait is over, then runs it for all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Batch[Key]:
    keys: list[Key] = field(default_factory=list)
    full: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    results: list[Any] = field(default_factory=list)
    error: BaseException | None = None


class Batcher[Key, Value]:
    """``submit(key)`` blocks until ``run(keys)`` has run for the batch holding ``key``.

    ``run`` returns one value per key, in order; if it raises, every caller in the batch
    gets the exception (each then deals with it on its own).
    """

    def __init__(
        self,
        run: Callable[[list[Key]], Sequence[Value]],
        size: Callable[[], int],
        wait: Callable[[], float],
        peers: Callable[[], int] = lambda: 1,
    ) -> None:
        self._run = run
        self._size = size
        self._wait = wait
        self._peers = peers
        self._lock = threading.Lock()
        self._open: _Batch[Key] | None = None
        #: Batches run, for tests and benchmarks.
        self.batches = 0

    def submit(self, key: Key) -> Value:
        with self._lock:
            batch = self._open
            leader = batch is None
            if batch is None:
                batch = self._open = _Batch()
            position = len(batch.keys)
            batch.keys.append(key)
            if len(batch.keys) >= min(self._size(), max(1, self._peers())):
                self._open = None  # full, or everyone running is in it: no one else joins
                batch.full.set()
        if leader:
            batch.full.wait(self._wait())
            with self._lock:
                if self._open is batch:
                    self._open = None  # later callers start the next batch
            try:
                batch.results = list(self._run(batch.keys))
            except BaseException as exc:
                batch.error = exc
            finally:
                self.batches += 1
                batch.done.set()
        else:
            batch.done.wait()
        if batch.error is not None:
            raise batch.error
        value: Value = batch.results[position]
        return value


class Gauge:
    """How many threads are in a stage now: the peers a batch of that stage waits for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def __enter__(self) -> Gauge:
        with self._lock:
            self.value += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self.value -= 1
