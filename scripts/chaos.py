"""The chaos run: jobs and webhook deliveries through 3 worker processes while faults land.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python scripts/chaos.py [--quick]
    DATABASE_URL=mysql://root@127.0.0.1:3306/chaos python scripts/chaos.py [--quick]

or ``make chaos [DATABASE_URL=…] [ARGS=--quick]`` (PostgreSQL's ``test`` when no URL is given).
It needs the database server of DATABASE_URL on this machine, Redis on 127.0.0.1:6379, and
the right to restart both: run it on a machine of your own, never against a database that
matters. It empties django_outbox's tables in that database first (on MariaDB it creates
the database if need be). The workers' wake-ups use Redis database 15 unless
OUTBOX_TEST_REDIS_URL names another (the test settings'); stopping Redis stops it for all.

- PostgreSQL: cut connections are ``pg_terminate_backend()``; the restart is
  ``pg_ctlcluster … restart``.
- MariaDB (``mysql://``): cut connections are ``KILL CONNECTION`` for each of the database's
  connections in ``information_schema.PROCESSLIST`` but the driver's own; the restart is
  ``mariadb-admin shutdown``, then ``start-stop-daemon --start … --exec /usr/sbin/mariadbd``
  once the old process is gone, then waiting for ``mariadb-admin ping``.

Every job (``tests.tasks.record_run``) records each of its runs (``tests.models.Execution``); the
webhook receiver (a thread here) records every request. At random moments it kills a worker
with SIGKILL (and starts another), terminates every worker connection, restarts the database
server once, stops Redis for 20 s (the workers use Redis wake-ups), and makes the receiver hang,
then answer 500, then recover. Then it checks, and exits 1 if any does not hold:

- every job succeeded, or failed with its errors recorded;
- no job ran twice at overlapping times (a run cut by a kill has no end, and is left out);
- every delivery succeeded, or failed after its whole retry schedule;
- every request the receiver got has its attempt in the log (one in flight when its worker
  was killed, or whose attempt could not be written, is logged as interrupted by the next
  run of its delivery);
- every killed worker was replaced, and nothing is left running.

``--soak MINUTES`` (``make soak``: 30) is the long form: work arrives steadily (50 jobs/s, 5
deliveries/s), a fault lands every 30 s (a kill, cut connections, Redis down, the receiver
failing, a database server restart, in turn), and the workers' resident memory is sampled every
10 s: the worker that is never killed must not grow over the run (its last third's peak
within 10 % of its middle third's).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from chaos_check import Tally, check
from chaos_servers import Database, database_server, restore_services, start_redis, stop_redis

if TYPE_CHECKING:
    from tests.receiver import Answer, Receiver

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The tests' settings: their tasks and Execution table, and knobs for short leases.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
WORKER_ENV = {
    "OUTBOX_TEST_WAKE": "redis",
    "OUTBOX_TEST_LEASE_SECONDS": "5",
    "OUTBOX_TEST_HEARTBEAT_SECONDS": "1",
    "OUTBOX_TEST_STALLED_CHECK_SECONDS": "2",
    "OUTBOX_TEST_POLL_INTERVAL": "0.5",
}
os.environ.update(WORKER_ENV)
WORKERS = 3
THREADS = 4


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--deliveries", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=150.0, help="how long jobs arrive")
    parser.add_argument(
        "--quick", action="store_true", help="3,000 jobs and 300 deliveries over 60 s (CI)"
    )
    parser.add_argument(
        "--soak",
        type=float,
        metavar="MINUTES",
        help="a fault every 30 s for MINUTES, 50 jobs/s and 5 deliveries/s, and the workers' "
        "memory sampled every 10 s",
    )
    parser.add_argument("--seed", type=int, default=None)
    options = parser.parse_args()
    if options.quick:
        options.jobs, options.deliveries, options.seconds = 3_000, 300, 60.0
    if options.soak:
        options.seconds = options.soak * 60
        options.jobs, options.deliveries = int(50 * options.seconds), int(5 * options.seconds)
    seed = options.seed if options.seed is not None else random.randrange(1 << 30)
    random.seed(seed)
    url = urlsplit(os.environ.get("DATABASE_URL", ""))
    database = database_server(url)
    if database is None:
        print("chaos: set DATABASE_URL to a scratch PostgreSQL or MariaDB database",
              file=sys.stderr)  # fmt: skip
        return 2
    name = url.path.lstrip("/")
    if not ({"test", "chaos", "scratch"} & set(re.split(r"[^a-z]+", name.lower()))):
        print(f"chaos: it empties django_outbox's tables in {name!r}; use a database named "
              "test, chaos or scratch", file=sys.stderr)  # fmt: skip
        return 2
    database.prepare()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", run_syncdb=True, verbosity=0)
    # This process enqueues: its failed wake-ups while Redis is down are expected.
    logging.getLogger("django_outbox.wake").setLevel(logging.ERROR)
    from tests.receiver import Answer, Receiver

    receiver = Receiver()
    print(f"chaos: seed {seed}; {options.jobs:,} jobs and {options.deliveries:,} deliveries "
          f"over {options.seconds:g} s; {WORKERS} workers x {THREADS} threads")  # fmt: skip
    tally = Tally()
    workers: list[subprocess.Popen[bytes]] = []
    try:
        _clean(receiver.url("/hook"))
        workers = [_start_worker(i) for i in range(WORKERS)]
        feeder = Feeder(options.jobs, options.deliveries, options.seconds)
        faults = _soak_faults(options.seconds) if options.soak else _chaos_faults(options.seconds)
        _inject_until_done(workers, receiver, Answer, tally, feeder, faults, database)
    finally:
        restore_services(database)
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        left_running = 0
        for worker in workers:
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
                left_running += 1
        receiver.close()
    return check(receiver, tally, options, left_running)


def _clean(url: str) -> None:
    from django_outbox import webhooks
    from django_outbox.models import Attempt, Delivery, Endpoint, Job, Message
    from django_outbox.models.jobs import Worker
    from tests.models import Execution

    for model in (Attempt, Delivery, Message, Endpoint, Job, Worker, Execution):
        model.objects.all().delete()
    webhooks.create_endpoint(url)


class Feeder:
    """Enqueues the jobs and sends the messages evenly over the run, in the faults' way:
    a call that fails (the database is down) is tried again on the next round."""

    def __init__(self, jobs: int, deliveries: int, seconds: float) -> None:
        self.jobs, self.deliveries, self.seconds = jobs, deliveries, seconds
        self.started = time.monotonic()
        self.enqueued = self.sent = 0

    @property
    def done(self) -> bool:
        return self.enqueued >= self.jobs and self.sent >= self.deliveries

    def feed(self) -> None:
        from django.db import InterfaceError, OperationalError, connection

        import django_outbox
        from django_outbox import webhooks
        from tests.tasks import record_run

        share = min(1.0, (time.monotonic() - self.started) / self.seconds)
        try:
            due = int(self.jobs * share) - self.enqueued
            if due > 0:
                calls = [
                    ((), {"key": str(self.enqueued + i), "seconds": _run_time()})
                    for i in range(due)
                ]
                django_outbox.enqueue_many(record_run, calls)
                self.enqueued += due
            while self.sent < int(self.deliveries * share):
                # The key makes a send that did commit, though its answer was lost, harmless.
                webhooks.send("chaos.event", {"n": self.sent}, idempotency_key=f"chaos-{self.sent}")
                self.sent += 1
        except (OperationalError, InterfaceError):
            connection.close()


def _run_time() -> float:
    """Most jobs take up to 20 ms; one in 50 takes 0.5 to 2 s, so kills cut some runs."""
    return random.uniform(0.5, 2.0) if random.random() < 0.02 else random.uniform(0, 0.02)


def _start_worker(number: int) -> subprocess.Popen[bytes]:
    with open(f"/tmp/outbox-chaos-worker-{number}-{time.monotonic_ns()}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworker", "--queues", "slow,webhooks",
             "--concurrency", str(THREADS)],
            cwd=ROOT, env={**os.environ}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _pending() -> int | None:
    """Jobs not yet finished, or None while the database does not answer."""
    from django.db import InterfaceError, OperationalError, connection

    from django_outbox.models import Job
    from django_outbox.models.jobs import JobStatus

    try:
        return Job.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).count()
    except (OperationalError, InterfaceError):
        connection.close()
        return None


def _chaos_faults(seconds: float) -> list[tuple[float, str]]:
    """Eight faults at random moments of the run: (seconds from its start, kind)."""
    kinds = ["kill", "kill", "kill", "terminate", "terminate", "restart", "redis", "receiver"]
    at = sorted(random.uniform(3, max(4, seconds - 25)) for _ in kinds)
    random.shuffle(kinds)
    return list(zip(at, kinds, strict=True))


def _soak_faults(seconds: float) -> list[tuple[float, str]]:
    """A fault every 30 s, each kind in turn."""
    kinds = ["kill", "terminate", "redis", "receiver", "restart"]
    return [(30.0 * n, kinds[(n - 1) % len(kinds)]) for n in range(1, int(seconds // 30))]


def _inject_until_done(
    workers: list[subprocess.Popen[bytes]],
    receiver: Receiver,
    answer: type[Answer],
    tally: Tally,
    feeder: Feeder,
    faults: list[tuple[float, str]],
    database: Database,
) -> None:
    """The faults while the work arrives, until every job is finished."""
    start = time.monotonic()
    faults = [(start + at, kind) for at, kind in faults]
    deadline = start + feeder.seconds + 600
    next_sample = start
    redis_back_at = None
    receiver_phase: list[tuple[float, str]] = []
    while time.monotonic() < deadline:
        now = time.monotonic()
        for i, worker in enumerate(workers):  # replace the dead (as a supervisor would)
            if worker.poll() is not None:
                if worker.pid not in tally.killed_pids:
                    tally.exited.append((worker.pid, worker.returncode))
                workers[i] = _start_worker(i)
                tally.replaced += 1
        if redis_back_at is not None and now >= redis_back_at:
            start_redis()
            redis_back_at = None
        while receiver_phase and now >= receiver_phase[0][0]:
            _, phase = receiver_phase.pop(0)
            answers = {"500": answer(500, body=b"down"), "ok": answer(200)}
            receiver.scripts["/hook"] = [answers.get(phase) or answer(200, delay=3.0)]
        if now >= next_sample:
            tally.sample(workers, now - start)
            next_sample = now + 10
        if faults and now >= faults[0][0]:
            fault = faults.pop(0)[1]
            tally.faults[fault] += 1
            if fault == "kill":
                # Worker 0 is never killed: it lives the whole run, to show its memory.
                victim = random.randrange(1, len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                tally.kills += 1
                tally.killed_pids.add(workers[victim].pid)
            elif fault == "terminate":
                database.cut_connections()
            elif fault == "restart":
                database.restart()
            elif fault == "redis":
                stop_redis()
                redis_back_at = now + 20
            elif fault == "receiver":
                receiver_phase = [(now, "hang"), (now + 4, "500"), (now + 8, "ok")]
            print(f"chaos: {fault} at {now - start:.1f} s", flush=True)
        feeder.feed()
        pending = _pending()
        calm = not faults and redis_back_at is None and not receiver_phase
        if pending == 0 and calm and feeder.done:
            return
        time.sleep(0.2)
    raise SystemExit("chaos: jobs still unfinished 10 minutes after the last arrived")


if __name__ == "__main__":
    sys.exit(main())
