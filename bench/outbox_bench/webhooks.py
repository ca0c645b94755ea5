"""The webhook benchmarks: delivery throughput, a retry burst, and the fan-out sweep.

Everything is sent to a local receiver (``outbox_bench.receiver``) on 127.0.0.1, which the
benchmark allows for itself (ALLOW_HTTP and 127.0.0.1/32) for the length of the run.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from django_outbox import conf, webhooks
from django_outbox.models import Attempt, Delivery, Endpoint, Job, Message
from django_outbox.webhooks import signing
from django_outbox.worker import Worker
from django_outbox.worker.process import WorkerOptions, start_in_thread
from outbox_bench import http_ceiling, pgstats, receiver
from outbox_bench.drain import default_worker_dir, run_forked, run_runworker
from outbox_bench.runworkers import bench_environment
from outbox_bench.statements import watching

BENCH_TENANT = "outbox-bench"


@contextmanager
def bench_settings(schedule: list[float] | None = None) -> Iterator[None]:
    """Allow the local receiver; optionally a quick retry schedule."""
    raw = dict(getattr(settings, "OUTBOX", {}))
    hooks = dict(raw.get("WEBHOOKS", {}))
    hooks["ALLOW_HTTP"] = True
    hooks["ALLOWED_NETWORKS"] = [*hooks.get("ALLOWED_NETWORKS", []), "127.0.0.1/32"]
    if schedule is not None:
        hooks["RETRY_SCHEDULE"] = schedule
    with override_settings(OUTBOX={**raw, "WEBHOOKS": hooks}):
        yield


def clean() -> None:
    """Remove what earlier runs left: the bench tenant's endpoints, messages and jobs.

    On PostgreSQL the emptied tables are vacuumed too, so every run starts alike: with
    autovacuum off or behind, the dead rows of earlier runs would slow each claim."""
    Job.objects.filter(queue=conf.get().WEBHOOKS.QUEUE).delete()
    Message.objects.filter(tenant=BENCH_TENANT).delete()
    Endpoint.objects.filter(tenant=BENCH_TENANT).delete()
    if connection.vendor == "postgresql":
        tables = [model._meta.db_table for model in (Job, Message, Endpoint, Delivery, Attempt)]
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {', '.join(tables)}")


def endpoints(url: str, count: int) -> None:
    """``count`` endpoints, each at a path of its own under ``url``."""
    Endpoint.objects.bulk_create(
        Endpoint(url=f"{url}/{number}", tenant=BENCH_TENANT, secret=signing.generate_secret())
        for number in range(count)
    )


def send_messages(count: int) -> None:
    for number in range(count):
        webhooks.send("bench.event", {"n": number}, tenant=BENCH_TENANT)


@dataclass(frozen=True, slots=True)
class Throughput:
    deliveries: int
    seconds: float
    per_s: float
    succeeded: int
    requests: int
    #: Statements the workers' main loops sent (claims, completions, heartbeats), per
    #: delivery; None when the workers did not say (a log level above INFO).
    loop_statements_per_delivery: float | None
    #: CPU time of the worker processes (all their threads), per delivery; for runworker,
    #: from the start of the interpreter, imports included.
    worker_cpu_ms_per_delivery: float | None
    #: From the first attempt's start to the last one's answer, as the attempt log records
    #: them (the plain-HTTP ceiling is timed the same way): deliveries per second.
    attempts_per_s: float = 0.0
    attempts_seconds: float = 0.0
    #: "runworker" (processes started as a user starts them) or "forked".
    workers: str = "runworker"


def throughput(
    deliveries: int,
    processes: int,
    concurrency: int,
    fan_out: int,
    *,
    forked: bool = False,
    worker_dir: Path | None = None,
) -> Throughput:
    """Send ``deliveries`` (messages times ``fan_out`` endpoints) to a receiver that answers 200
    at once, then time ``processes`` workers delivering them all: ``runworker --burst
    --processes P --concurrency T`` started in ``worker_dir`` (this checkout by default) as
    a user starts it, or, ``forked``, workers forked from this process."""
    clean()
    server = receiver.start()
    try:
        with bench_settings():
            endpoints(server.url, fan_out)
            send_messages(max(1, deliveries // fan_out))
            total = Delivery.objects.filter(message__tenant=BENCH_TENANT).count()
            options = WorkerOptions(
                queues=[conf.get().WEBHOOKS.QUEUE], concurrency=concurrency, burst=True
            )
            if forked:
                ran = run_forked(options, processes)
            else:
                ran = run_runworker(
                    options,
                    processes,
                    worker_dir or default_worker_dir(),
                    timeout=120 + total / 50,  # a stuck run, not a slow one
                    env=bench_environment(loopback_webhooks=True),
                )
    finally:
        counts = server.stop()
    succeeded = Delivery.objects.filter(message__tenant=BENCH_TENANT, status="succeeded").count()
    logged = list(
        Attempt.objects.filter(delivery__message__tenant=BENCH_TENANT).values_list(
            "started_at", "duration"
        )
    )
    clean()
    window = ran.wall_seconds
    if logged:
        first = min(started for started, _ in logged).timestamp()
        window = max(started.timestamp() + duration for started, duration in logged) - first
    return Throughput(
        total,
        ran.wall_seconds,
        total / ran.wall_seconds,
        succeeded,
        counts["requests"],
        None if ran.statements is None else ran.statements / total,
        None if ran.cpu_seconds is None else ran.cpu_seconds * 1000 / total,
        attempts_per_s=succeeded / max(window, 1e-6),
        attempts_seconds=window,
        workers="forked" if forked else "runworker",
    )


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The plain-HTTP ceiling's run, and what the receiver saw."""

    figures: http_ceiling.HttpCeiling
    requests: int


def ceiling(
    deliveries: int, processes: int, concurrency: int, fan_out: int, client: str = "httpcore"
) -> Ceiling:
    """The same deliveries (messages times ``fan_out`` endpoints), POSTed signed to the
    same receiver by ``processes`` x ``concurrency`` plain HTTP senders (``http_ceiling``)
    using ``client``."""
    total = max(1, deliveries // fan_out) * fan_out  # as many as throughput() sends
    server = receiver.start()
    try:
        figures = http_ceiling.run(server.url, total, fan_out, processes, concurrency, client)
    finally:
        counts = server.stop()
    return Ceiling(figures, counts["requests"])


def _quoted(name: str) -> str:
    """A pattern for ``name`` as any of our databases' SQL may write it: bare, or quoted."""
    return f'["`]?{re.escape(name)}["`]?'


@dataclass
class DeliveryLoads:
    """The deliveries' loads and latest-attempt lookups, told apart by their statements
    (``observe``, on the thread that runs each): a retry's load is followed on its thread
    by the lookup of the latest attempts; a first attempt's load by no lookup."""

    #: Loads of deliveries (with their message and endpoint), first attempts' and retries'.
    loads: int = 0
    #: Loads followed by a latest-attempt lookup: the retries' batches.
    retry_loads: int = 0
    #: Latest-attempt lookup queries (a batch of bounds over 15 minutes apart runs more).
    lookups: int = 0
    _after_load: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # Names as the ORM quotes them: "name" on PostgreSQL and SQLite, `name` on MariaDB.
    _LOAD = re.compile(
        rf"^SELECT .* FROM {_quoted(Delivery._meta.db_table)} INNER JOIN .*"
        rf"{_quoted(Endpoint._meta.db_table)}.* "
        rf"WHERE {_quoted(Delivery._meta.db_table)}\.{_quoted('id')} IN ",
        re.S,
    )
    _LOOKUP = re.compile(rf"^SELECT (?!COUNT\().* FROM {_quoted(Attempt._meta.db_table)}", re.S)

    def observe(self, sql: str) -> None:
        thread = threading.get_ident()
        with self._lock:
            if self._LOAD.match(sql):
                self.loads += 1
                self._after_load.add(thread)
            elif self._LOOKUP.match(sql):
                self.lookups += 1
                if thread in self._after_load:
                    self.retry_loads += 1
                self._after_load.discard(thread)
            else:
                self._after_load.discard(thread)


@dataclass(frozen=True, slots=True)
class RetryBurst:
    deliveries: int
    attempts: int
    retries: int
    #: Latest-attempt queries in all (a batch of bounds over 15 minutes apart runs more).
    lookup_queries: int
    #: Loads of first attempts (a job's first run looks up no earlier attempt).
    first_load_batches: int
    retry_lookup_batches: int
    seconds: float

    @property
    def lookups_per_retry(self) -> float:
        return self.retry_lookup_batches / max(1, self.retries)


def retry_burst(deliveries: int, concurrency: int, fan_out: int = 50) -> RetryBurst:
    """``deliveries`` that each fail once (500) and then succeed; count the latest-attempt
    lookup queries per retry. One worker on threads of this process, so that the
    statements of its threads can be watched (``DeliveryLoads``)."""
    clean()
    server = receiver.start(fail_first=1)
    loads = DeliveryLoads()
    try:
        with bench_settings(schedule=[0, 0.5, 1, 1]):
            endpoints(server.url, fan_out)
            send_messages(max(1, deliveries // fan_out))
            total = Delivery.objects.filter(message__tenant=BENCH_TENANT).count()
            worker = Worker(queues=[conf.get().WEBHOOKS.QUEUE], concurrency=concurrency)
            with watching(loads.observe):
                started = time.perf_counter()
                thread = start_in_thread(worker)
                pending = Delivery.objects.filter(message__tenant=BENCH_TENANT, status="pending")
                deadline = time.monotonic() + 600
                while pending.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                seconds = time.perf_counter() - started
                worker.request_stop("benchmark done")
                thread.join(60)
    finally:
        server.stop()
    logged = Attempt.objects.filter(delivery__message__tenant=BENCH_TENANT).count()
    figures = RetryBurst(
        deliveries=total,
        attempts=logged,
        retries=logged - total,
        lookup_queries=loads.lookups,
        first_load_batches=loads.loads - loads.retry_loads,
        retry_lookup_batches=loads.retry_loads,
        seconds=seconds,
    )
    clean()
    return figures


@dataclass(frozen=True, slots=True)
class FanOut:
    endpoints: int
    statements_per_send: float
    wal_bytes_per_send: float | None


def fan_out(sizes: list[int], sends: int = 20) -> list[FanOut]:
    """Statements (and PostgreSQL WAL bytes) per ``send()`` for E matching endpoints."""
    rows = []
    for size in sizes:
        clean()
        with bench_settings():
            endpoints("https://hooks.example.com/in", size)
            wal_before = pgstats.wal_position()
            with CaptureQueriesContext(connection) as queries:
                send_messages(sends)
            wal_after = pgstats.wal_position()
        statements = sum("pg_notify" not in q["sql"] for q in queries) / sends
        wal = None
        if wal_before is not None and wal_after is not None:
            wal = (wal_after - wal_before) / sends
        rows.append(FanOut(size, statements, wal))
    clean()
    return rows
