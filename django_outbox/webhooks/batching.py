"""Gathering calls made at the same time on different threads into one batch.

Deliveries run on the worker's threads, one each. When several run at once, their lookups
(and their writes) go to the database as one statement. Two ways to gather:

- **Group commit** (no ``wait``): a caller that finds no batch running runs its own at
  once; callers that arrive while a batch runs gather into the next one, which runs as
  soon as the running one ends. A lone caller never waits, and batches grow with the load:
  under many threads each statement carries what arrived during the one before.
- **A gathering wait** (``wait``): the first caller of a batch waits up to ``wait`` for
  others (or until the batch is full), then runs it. For calls that arrive one by one,
  such as retries falling due at jittered times, which group commit would run one each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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
    gets the exception (each then deals with it on its own). A batch holds at most
    ``size()`` keys. ``wait`` None: group commit, one run at a time; else the first caller
    gathers for up to ``wait()`` seconds.
    """

    def __init__(
        self,
        run: Callable[[list[Key]], Sequence[Value]],
        size: Callable[[], int],
        wait: Callable[[], float] | None = None,
    ) -> None:
        self._run = run
        self._size = size
        self._wait = wait
        self._lock = threading.Lock()
        #: Held while a group-commit batch runs.
        self._running = threading.Lock()
        self._open: _Batch[Key] | None = None
        #: Batches run so far (benchmarks and tests read it).
        self.batches = 0

    def submit(self, key: Key) -> Value:
        with self._lock:
            batch = self._open
            if batch is None:
                batch = self._open = _Batch()
            position = len(batch.keys)
            batch.keys.append(key)
            if len(batch.keys) >= self._size():
                self._open = None  # full: the next caller starts another
                batch.full.set()
        if position:
            batch.done.wait()
        elif self._wait is None:
            with self._running:  # the batch before this one runs: keep gathering meanwhile
                self._close(batch)
                self._lead(batch)
        else:
            batch.full.wait(self._wait())
            self._close(batch)
            self._lead(batch)
        if batch.error is not None:
            raise batch.error
        value: Value = batch.results[position]
        return value

    def _close(self, batch: _Batch[Key]) -> None:
        """No one joins ``batch`` from now on: the next caller starts another."""
        with self._lock:
            if self._open is batch:
                self._open = None

    def _lead(self, batch: _Batch[Key]) -> None:
        try:
            batch.results = list(self._run(batch.keys))
        except BaseException as exc:
            batch.error = exc
        finally:
            self.batches += 1
            batch.done.set()
