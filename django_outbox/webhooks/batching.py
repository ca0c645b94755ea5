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


@dataclass
class _Load(Generic[Key]):
    keys: list[Key]
    done: threading.Event = field(default_factory=threading.Event)
    values: dict[Key, Any] = field(default_factory=dict)
    error: BaseException | None = None
    #: When the load ended (monotonic; 0: still running).
    at: float = 0.0


class ReadAhead(Generic[Key, Value]):
    """``get(key, ahead)``: the value of ``key``, loaded in one batch with the keys
    ``ahead()`` gives, which the next calls will ask for (the jobs queued behind this one).

    A call whose key an earlier batch loaded, or is loading, takes it from there; any other
    call loads at once, for itself and those ahead: no call waits for others to arrive.
    Values loaded longer than ``fresh`` seconds ago are not used (loaded again), and those
    never asked for (a job that did not start here) are dropped as they age.
    """

    def __init__(
        self,
        load: Callable[[list[Key]], Sequence[Value]],
        size: Callable[[], int],
        fresh: float = 1.0,
    ) -> None:
        self._load = load
        self._size = size
        self._fresh = fresh
        self._lock = threading.Lock()
        self._loads: dict[Key, _Load[Key]] = {}

    def get(self, key: Key, ahead: Callable[[], Sequence[Key]] = tuple) -> Value:
        """``ahead()`` is asked only when ``key`` must be loaded."""
        now = time.monotonic()
        with self._lock:
            load = self._take(key, now)
        leader = load is None
        if load is None:
            keys = ahead()
            with self._lock:
                load = self._take(key, now)  # another load may have taken it up meanwhile
                leader = load is None
                if load is None:
                    load = self._start(key, keys, now)
        if leader:
            self._run(load)
        else:
            load.done.wait()
            if load.error is not None:  # the leader's problem, maybe not this key's
                return self._alone(key)
        if load.error is not None:
            raise load.error
        value: Value = load.values[key]
        return value

    def _take(self, key: Key, now: float) -> _Load[Key] | None:
        load = self._loads.pop(key, None)
        return None if load is not None and self._stale(load, now) else load

    def _start(self, key: Key, ahead: Sequence[Key], now: float) -> _Load[Key]:
        if len(self._loads) > 4 * max(1, self._size()):
            stale = [
                k for k, load in self._loads.items() if load.at and now - load.at > self._fresh
            ]
            for k in stale:
                del self._loads[k]
        keys = [key]
        size = self._size()
        for k in ahead:
            if len(keys) >= size:
                break
            if k != key and k not in self._loads:
                keys.append(k)
        load = _Load(list(dict.fromkeys(keys)))
        for k in load.keys[1:]:
            self._loads[k] = load
        return load

    def _stale(self, load: _Load[Key], now: float) -> bool:
        return bool(load.at) and now - load.at > self._fresh

    def _run(self, load: _Load[Key]) -> None:
        try:
            load.values = dict(zip(load.keys, self._load(load.keys), strict=True))
        except BaseException as exc:
            load.error = exc
        finally:
            load.at = time.monotonic()
            load.done.set()

    def _alone(self, key: Key) -> Value:
        load = _Load([key])
        self._run(load)
        if load.error is not None:
            raise load.error
        value: Value = load.values[key]
        return value
