"""The jobs ``outbox_bench latency`` and ``limited`` run: each says when it ran.

Imported as ``outbox_bench_tasks`` (see ``__init__``), so that a worker of another checkout
runs them too. The times are ``time.time()`` in the worker, compared with the benchmark's
own clock on the same machine.
"""

from __future__ import annotations

import time

from django_outbox.compat import task


@task()
def stamp() -> float:
    """Nothing but the time the job started."""
    return time.time()


@task()
def sleep_and_stamp(seconds: float) -> list[float]:
    """Sleep ``seconds``; return when the run started and when it ended."""
    started = time.time()
    time.sleep(seconds)
    return [started, time.time()]
