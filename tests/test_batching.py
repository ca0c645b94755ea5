"""Calls from several threads at once become one batch."""

from __future__ import annotations

import threading
import time

import pytest

from django_outbox.webhooks.batching import Batcher


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
    def broken(keys):
        raise RuntimeError("database gone")

    batcher = Batcher(broken, size=lambda: 50, wait=lambda: 0.2)
    results = run_together(batcher, [1, 2, 3])
    assert all(isinstance(r, RuntimeError) for r in results)
    assert batcher.batches >= 1
    with pytest.raises(RuntimeError):
        batcher.submit(4)
