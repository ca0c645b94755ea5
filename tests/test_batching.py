"""Calls from several threads at once become one batch."""

from __future__ import annotations

import threading
import time

import pytest

from django_outbox.webhooks.batching import Batcher, ReadAhead


def run_together(batcher: Batcher, keys: list[int]) -> list:
    results: dict[int, object] = {}
    start = threading.Barrier(len(keys))

    def call(key: int) -> None:
        start.wait()
        try:
            results[key] = batcher.submit(key)
        except Exception as exc:
            results[key] = exc

    threads = [threading.Thread(target=call, args=(k,)) for k in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return [results[k] for k in keys]


def test_concurrent_calls_share_one_run_and_each_gets_its_own_result():
    runs = []
    batcher = Batcher(
        lambda keys: runs.append(list(keys)) or [k * 10 for k in keys],
        size=lambda: 50,
        wait=lambda: 0.5,
    )
    assert run_together(batcher, list(range(8))) == [k * 10 for k in range(8)]
    assert len(runs) == 1 and sorted(runs[0]) == list(range(8))


def test_a_batch_never_exceeds_its_size():
    runs = []
    batcher = Batcher(
        lambda keys: runs.append(len(keys)) or list(keys), size=lambda: 3, wait=lambda: 0.2
    )
    run_together(batcher, list(range(7)))
    assert max(runs) <= 3 and sum(runs) == 7


def test_a_lone_call_waits_only_for_the_lull_not_the_whole_wait():
    batcher = Batcher(lambda keys: list(keys), size=lambda: 50, wait=lambda: 30)
    began = time.monotonic()
    assert batcher.submit(7) == 7
    assert time.monotonic() - began < 1  # not the 30 s wait


def test_a_failed_run_fails_every_caller_in_the_batch():
    runs = []

    def broken(keys):
        runs.append(list(keys))
        raise RuntimeError("database gone")

    batcher = Batcher(broken, size=lambda: 50, wait=lambda: 0.2)
    results = run_together(batcher, [1, 2, 3])
    assert all(isinstance(r, RuntimeError) for r in results)
    assert runs and sorted(k for run in runs for k in run) == [1, 2, 3]
    with pytest.raises(RuntimeError):
        batcher.submit(4)


def reader(fresh: float = 1.0, fail_on: int | None = None) -> tuple[ReadAhead, list[list[int]]]:
    loads: list[list[int]] = []

    def load(keys: list[int]) -> list[int]:
        loads.append(list(keys))
        if fail_on in keys:
            raise ValueError(f"cannot load {fail_on}")
        return [k * 10 for k in keys]

    return ReadAhead(load, size=lambda: 4, fresh=fresh), loads


def test_a_read_ahead_loads_the_keys_ahead_with_its_own_and_they_cost_nothing_after():
    ahead, loads = reader()
    assert ahead.get(1, lambda: [2, 3, 4, 5, 6]) == 10
    assert loads == [[1, 2, 3, 4]]  # at most its size
    assert [ahead.get(k, lambda: [5, 6]) for k in (2, 3, 4)] == [20, 30, 40]
    assert loads == [[1, 2, 3, 4]]
    assert ahead.get(5, lambda: [6]) == 50
    assert loads[-1] == [5, 6]


def test_a_lone_read_loads_at_once_without_waiting_for_company():
    ahead, loads = reader()
    began = time.monotonic()
    assert ahead.get(7) == 70
    assert time.monotonic() - began < 0.05  # nothing to wait for: it does not try
    assert loads == [[7]]


def test_a_key_being_loaded_waits_for_that_load_and_is_not_loaded_twice():
    started, release = threading.Event(), threading.Event()
    loads: list[list[int]] = []

    def slow(keys: list[int]) -> list[int]:
        loads.append(list(keys))
        started.set()
        release.wait(5)
        return [k * 10 for k in keys]

    ahead = ReadAhead(slow, size=lambda: 10)
    results: dict[int, int] = {}
    first = threading.Thread(target=lambda: results.update({1: ahead.get(1, lambda: [2])}))
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=lambda: results.update({2: ahead.get(2)}))
    second.start()
    time.sleep(0.05)
    assert 2 not in results  # waiting for the load that holds it
    release.set()
    for thread in (first, second):
        thread.join(5)
    assert results == {1: 10, 2: 20} and loads == [[1, 2]]


def test_a_value_read_ahead_too_long_ago_is_loaded_again():
    ahead, loads = reader(fresh=0.05)
    ahead.get(1, lambda: [2])
    time.sleep(0.1)
    assert ahead.get(2) == 20
    assert loads == [[1, 2], [2]]


def test_when_the_leaders_load_fails_the_others_load_their_own():
    ahead, loads = reader(fail_on=1)
    with pytest.raises(ValueError, match="cannot load 1"):
        ahead.get(1, lambda: [2, 3])
    assert ahead.get(2) == 20  # its own load, without the key that failed
    assert loads == [[1, 2, 3], [2]]


def test_values_never_asked_for_are_dropped_as_they_age():
    ahead, _loads = reader(fresh=0.01)
    for first in range(0, 40, 4):
        ahead.get(first, lambda first=first: list(range(first + 1, first + 4)))
        time.sleep(0.02)
    assert len(ahead._loads) <= 4 * 4 + 3


def test_what_is_ahead_is_asked_only_when_a_load_is_needed():
    ahead, _loads = reader()
    asked: list[int] = []

    def upcoming(key: int) -> list[int]:
        asked.append(key)
        return [key + 1]

    ahead.get(1, lambda: upcoming(1))
    ahead.get(2, lambda: upcoming(2))  # loaded with 1: nothing to ask
    assert asked == [1]
