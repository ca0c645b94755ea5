"""The Procrastinate peer's own side: its app and the steps its child processes run.

``python -m outbox_bench.peers.procrastinate_app setup | enqueue N |
enqueue-paced N GAP | worker CONCURRENCY [--once]``, on the database and schema given in
the environment. Plain Procrastinate, no Django: its documented defaults, a no-op task.
"""

from __future__ import annotations

import os
import sys
import time

import procrastinate

from outbox_bench.peers.base import PG_ENV, printed

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(PG_ENV)))


@app.task(name="outbox_bench_noop")
def noop() -> None:
    return None


def _main(step: str, *args: str) -> None:
    if step == "worker":
        # wait=False: leave once no job is left (the drain); else wait for jobs as usual.
        app.run_worker(concurrency=int(args[0]), wait="--once" not in args)
        return
    with app.open():
        if step == "setup":
            app.schema_manager.apply_schema()
        elif step == "enqueue":
            count = int(args[0])
            started = time.perf_counter()
            noop.batch_defer(*[{}] * count)  # its bulk enqueue
            printed({"per_s": count / (time.perf_counter() - started)})
        elif step == "enqueue-paced":
            count, gap = int(args[0]), float(args[1])
            for _ in range(count):
                noop.defer()
                time.sleep(gap)
        else:
            raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    _main(*sys.argv[1:])
