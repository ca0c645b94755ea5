"""The Celery peer's own side: its app, a no-op task, and the steps its child processes run.

``python -m outbox_bench.peers.celery_app enqueue N | enqueue-paced N GAP``; the
workers are ``celery -A outbox_bench.peers.celery_app worker``. Celery's defaults
with a Redis broker, but for the thread pool; every key it writes starts with ``PREFIX``.
The task counts itself done in Redis (Celery has no record of it without a result backend).
"""

from __future__ import annotations

import os
import sys
import time

import redis
from celery import Celery

from outbox_bench.peers.base import REDIS_ENV, printed

PREFIX = "outbox_bench_celery:"
DONE = f"{PREFIX}done"
PICKUPS = f"{PREFIX}pickups"

_url = os.environ.get(REDIS_ENV, "redis://127.0.0.1:6379/0")
app = Celery("outbox_bench", broker=_url)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
)
_store = redis.Redis.from_url(_url)


@app.task(name="outbox_bench_noop")
def noop(sent: float | None = None) -> None:
    if sent is not None:  # the latency run: how long the message waited
        _store.rpush(PICKUPS, (time.time() - sent) * 1000)
    _store.incr(DONE)


def _main(step: str, *args: str) -> None:
    if step == "enqueue":
        count = int(args[0])
        started = time.perf_counter()
        for _ in range(count):  # Celery has no bulk send: one message per job
            noop.delay()
        printed({"per_s": count / (time.perf_counter() - started)})
    elif step == "enqueue-paced":
        count, gap = int(args[0]), float(args[1])
        for _ in range(count):
            noop.delay(sent=time.time())
            time.sleep(gap)
    else:
        raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    _main(*sys.argv[1:])
