"""The enqueuing process of ``outbox_bench latency`` and ``limited``.

``python -m outbox_bench_enqueue``, started by the benchmark from the same checkout and
with the same settings as its ``runworker`` processes (so the wake-up sender that runs on
commit is that checkout's too), like a web process of the site. It reads one JSON line
from stdin (the task of ``outbox_bench_tasks``, its arguments, the queue, and the
schedule), sets Django up, connects, and prints ``ready``; on ``go`` it enqueues on the
schedule and prints one JSON line: each job's primary key and the moment its enqueue
returned (``time.time()``). Then it stays, as a web process would, until its stdin closes.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any


def schedule(
    jobs: int, gap_ms: float, burst: int, enqueue_one: Callable[[], int]
) -> tuple[list[tuple[int, float]], float]:
    """Enqueue ``jobs`` jobs, ``burst`` back to back every ``gap_ms``; returns (key, when
    its enqueue returned) for each, and the seconds it took. Bursts start ``gap_ms`` apart
    on the clock, so a slow enqueue does not stretch the schedule."""
    sent: list[tuple[int, float]] = []
    gap = gap_ms / 1000
    started = time.monotonic()
    rounds = 0
    while len(sent) < jobs:
        pause = started + rounds * gap - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        for _ in range(min(burst, jobs - len(sent))):
            key = enqueue_one()
            sent.append((key, time.time()))
        rounds += 1
    return sent, time.monotonic() - started


def result_pk(result_id: object) -> int:
    """The job's primary key from a result id ("42", or "42-5f3a9c1" with its token)."""
    return int(str(result_id).split("-", 1)[0])


def main() -> None:
    config: dict[str, Any] = json.loads(sys.stdin.readline())
    import django

    django.setup()
    import outbox_bench_tasks
    from django.db import connection, transaction

    task = getattr(outbox_bench_tasks, config["task"]).using(queue_name=config["queue"])
    args = config.get("args", [])
    connection.ensure_connection()

    def autocommit() -> int:
        return result_pk(task.enqueue(*args).id)

    def atomic() -> int:
        with transaction.atomic():
            result = task.enqueue(*args)
        return result_pk(result.id)

    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    began = time.time()
    sent, seconds = schedule(
        config["jobs"],
        config["gap_ms"],
        config["burst"],
        atomic if config["enqueue"] == "atomic" else autocommit,
    )
    print(json.dumps({"began": began, "seconds": seconds, "sent": sent}), flush=True)
    sys.stdin.read()  # stay, as a site's process does, until the benchmark is done


if __name__ == "__main__":
    main()
