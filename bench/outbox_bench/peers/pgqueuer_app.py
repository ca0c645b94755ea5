"""The PgQueuer peer's own side: the steps its child processes run.

``python -m outbox_bench.peers.pgqueuer_app setup | enqueue N | enqueue-paced N GAP |
worker CONSUMERS [--drain]``, on the database and schema given in the environment. Plain
PgQueuer, no Django: its asyncpg driver (the one its documentation finds fastest), uvloop
when installed (as its ``pgq run`` does), its defaults (a dequeue batch of 10), and an
async no-op entrypoint. A worker process runs CONSUMERS queue managers at once, each on a
connection of its own, as PgQueuer's own benchmark runs its ``--dequeue`` consumers.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Coroutine
from typing import Any

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode
from psycopg.conninfo import conninfo_to_dict

from outbox_bench.peers.base import PG_ENV, printed

ENTRYPOINT = "outbox_bench_noop"


async def _connect() -> Any:
    """An asyncpg connection to the peer's database, its schema first on the search path."""
    params: dict[str, Any] = dict(conninfo_to_dict(os.environ[PG_ENV]))
    search_path = re.search(r"search_path=(\S+)", str(params.pop("options", "")))
    return await asyncpg.connect(
        host=params.get("host"),
        port=int(params["port"]) if params.get("port") else None,
        user=params.get("user"),
        password=params.get("password"),
        database=params.get("dbname"),
        server_settings={"search_path": search_path.group(1)} if search_path else {},
    )


async def _consume(drain: bool) -> None:
    pgq = PgQueuer(AsyncpgDriver(await _connect()))

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        return None

    mode = QueueExecutionMode.drain if drain else QueueExecutionMode.continuous
    await pgq.run(mode=mode)


async def _main(step: str, *args: str) -> None:
    if step == "worker":
        consumers = int(args[0])
        await asyncio.gather(*[_consume("--drain" in args) for _ in range(consumers)])
        return
    connection = await _connect()
    queries = Queries(AsyncpgDriver(connection))
    if step == "setup":
        await queries.install()
    elif step == "enqueue":
        count = int(args[0])
        started = time.perf_counter()
        # Its bulk enqueue: one statement for every job.
        await queries.enqueue([ENTRYPOINT] * count, [None] * count, [0] * count)
        printed({"per_s": count / (time.perf_counter() - started)})
    elif step == "enqueue-paced":
        count, gap = int(args[0]), float(args[1])
        for _ in range(count):
            await queries.enqueue(ENTRYPOINT, None)
            await asyncio.sleep(gap)
    else:
        raise SystemExit(f"unknown step {step!r}")
    await connection.close()


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


if __name__ == "__main__":
    _run(_main(*sys.argv[1:]))
