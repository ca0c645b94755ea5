"""The chaos run: jobs and webhook deliveries through 3 worker processes while faults land.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python scripts/chaos.py [--quick]

It needs PostgreSQL (DATABASE_URL), Redis on 127.0.0.1:6379, and the right to restart both
(it runs ``pg_ctlcluster … restart`` and stops Redis): run it on a machine of your own, never
against a database that matters. It empties django_outbox's tables in that database first.

Every job (``tests.tasks.record_run``) records each of its runs (``tests.models.Execution``); the
webhook receiver (a thread here) records every request. At random moments it kills a worker
with SIGKILL (and starts another), terminates every worker connection, restarts PostgreSQL
once, stops Redis for 20 s (the workers use Redis wake-ups), and makes the receiver hang,
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
failing, a PostgreSQL restart, in turn), and the workers' resident memory is sampled every
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

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
REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379",
               "--save", ""]  # fmt: skip
WORKERS = 3
THREADS = 4


@dataclass
class Tally:
    faults: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    replaced: int = 0
    killed_pids: set[int] = field(default_factory=set)
    #: Workers that exited without being killed: (pid, exit status).
    exited: list[tuple[int, int]] = field(default_factory=list)
    #: (seconds into the run, worker slot, pid, resident MB) every 10 s.
    memory: list[tuple[float, int, int, float]] = field(default_factory=list)

    def sample(self, workers: list[subprocess.Popen[bytes]], at: float) -> None:
        for slot, worker in enumerate(workers):
            try:
                status = Path(f"/proc/{worker.pid}/status").read_text()
            except OSError:
                continue  # just exited
            kb = next(
                int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")
            )
            self.memory.append((at, slot, worker.pid, kb / 1024))

    def memory_report(self) -> tuple[str, bool]:
        """The peak, and whether the worker that lived the whole run grew: its last third's
        peak against its second third's (the first holds start-up and warm-up)."""
        if not self.memory:
            return "no samples", True
        peak = max(mb for *_, mb in self.memory)
        first = self.memory[0][2]
        own = [(at, mb) for at, slot, pid, mb in self.memory if slot == 0 and pid == first]
        third = len(own) // 3
        if third < 2:
            return f"peak worker RSS {peak:.0f} MB", True
        middle = max(mb for _, mb in own[third : 2 * third])
        last = max(mb for _, mb in own[2 * third :])
        grew = last > middle * 1.10
        return (
            f"peak worker RSS {peak:.0f} MB; the worker that lived throughout: {own[0][1]:.0f} MB "
            f"at start, {middle:.0f} MB peak in the middle third, {last:.0f} MB in the last",
            not grew,
        )


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
    if not url.scheme.startswith("postgres"):
        print("chaos: set DATABASE_URL to a scratch PostgreSQL database", file=sys.stderr)
        return 2
    name = url.path.lstrip("/")
    if not ({"test", "chaos", "scratch"} & set(re.split(r"[^a-z]+", name.lower()))):
        print(f"chaos: it empties django_outbox's tables in {name!r}; use a database named "
              "test, chaos or scratch", file=sys.stderr)  # fmt: skip
        return 2

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
        _inject_until_done(workers, receiver, Answer, tally, feeder, faults)
    finally:
        _restore_services()
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
    return _check(receiver, tally, options, left_running)


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
    workers, receiver, answer, tally: Tally, feeder: Feeder, faults: list[tuple[float, str]]
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
            subprocess.run(REDIS_START, check=True, stdout=subprocess.DEVNULL)
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
                _terminate_worker_connections()
            elif fault == "restart":
                subprocess.run(
                    ["pg_ctlcluster", "--skip-systemctl-redirect", *_pg_cluster(), "restart"],
                    check=True,
                )
            elif fault == "redis":
                subprocess.run(["redis-cli", "shutdown", "nosave"], stdout=subprocess.DEVNULL)
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


def _terminate_worker_connections() -> None:
    from django.db import DatabaseError, connection

    for _ in range(2):  # this process's own connection may be the one a fault cut
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            return
        except DatabaseError:
            connection.close()


def _pid(worker_id: str) -> int:
    """The pid in a worker id (``host:pid:random``)."""
    return int(worker_id.split(":")[-2])


def _pg_cluster() -> list[str]:
    """The local cluster (version, name) that serves DATABASE_URL's port."""
    port = str(urlsplit(os.environ["DATABASE_URL"]).port or 5432)
    listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True)
    for line in listing.stdout.splitlines():
        version, cluster, cluster_port, *_ = line.split()
        if cluster_port == port:
            return [version, cluster]
    raise SystemExit(f"chaos: no local PostgreSQL cluster on port {port} to restart")


def _restore_services() -> None:
    """Leave PostgreSQL and Redis running, whatever happened."""
    if subprocess.run(["redis-cli", "ping"], capture_output=True).returncode != 0:
        subprocess.run(REDIS_START, stdout=subprocess.DEVNULL)
    if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode != 0:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *_pg_cluster(), "start"])
    for _ in range(30):
        if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0:
            return
        time.sleep(1)


def _check(receiver, tally: Tally, options: argparse.Namespace, left_running: int) -> int:
    from django.conf import settings
    from django.db import connection
    from django.db.models import Count

    from django_outbox.models import Attempt, Delivery, DeliveryStatus, Job, Message
    from django_outbox.models.jobs import JobStatus, Worker
    from tests.models import Execution

    connection.close()
    broken: list[str] = []
    jobs = Job.objects.filter(task_path="tests.tasks.record_run")
    statuses = Counter(jobs.values_list("status", flat=True))
    finished = statuses[JobStatus.SUCCEEDED] + statuses[JobStatus.FAILED]
    # At least every job enqueued; a few more if a commit's answer was lost and the batch
    # was enqueued again (the enqueue was then, rightly, not known to have happened).
    if finished != sum(statuses.values()) or finished < options.jobs:
        broken.append(f"jobs not all finished: {dict(statuses)}")
    if jobs.filter(status=JobStatus.FAILED, errors=[]).exists():
        broken.append("a failed job has no error recorded")
    table = Execution._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {table} a JOIN {table} b "
            "ON a.job_id = b.job_id AND a.id < b.id "
            "WHERE a.finished IS NOT NULL AND b.finished IS NOT NULL "
            "AND a.started < b.finished AND b.started < a.finished"
        )
        overlapping = cursor.fetchone()[0]
    if overlapping:
        broken.append(f"{overlapping} pairs of runs of one job overlapped in time")
    runs = Execution.objects.count()
    unfinished = list(
        Execution.objects.filter(finished__isnull=True).values_list("worker", flat=True)
    )
    cut = sum(1 for worker in unfinished if _pid(worker) in tally.killed_pids)
    if cut != len(unfinished):
        # Its end was not recorded, though its worker lived: it could hide an overlap.
        broken.append(f"{len(unfinished) - cut} runs have no end, and no kill explains it")
    twice = Execution.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1).count()

    schedule = len(settings.OUTBOX["WEBHOOKS"]["RETRY_SCHEDULE"])
    deliveries = Counter(Delivery.objects.values_list("status", flat=True))
    ended = deliveries[DeliveryStatus.SUCCEEDED] + deliveries[DeliveryStatus.FAILED]
    if ended != options.deliveries or ended != sum(deliveries.values()):
        broken.append(f"deliveries not all finished: {dict(deliveries)}")
    short = Delivery.objects.filter(status=DeliveryStatus.FAILED, attempts__lt=schedule).count()
    if short:
        broken.append(f"{short} deliveries failed before the end of their schedule")
    uid_to_delivery = dict(Message.objects.values_list("uid", "deliveries__id"))
    requests = Counter(
        uid_to_delivery.get(r.headers.get("webhook-id")) for r in receiver.at("/hook")
    )
    logged = Counter(Attempt.objects.values_list("delivery_id", flat=True))
    unlogged = sum(max(0, n - logged[d]) for d, n in requests.items())
    # A request in flight when its worker is killed, or whose attempt could not be written
    # because the database went away, is logged as interrupted by the delivery's next run.
    if unlogged:
        broken.append(f"{unlogged} requests the receiver got have no attempt in the log")
    interrupted = Attempt.objects.filter(error_class="Interrupted").count()
    for pid, status in tally.exited:
        broken.append(f"worker {pid} exited on its own, with status {status}")
    if left_running or Job.objects.filter(status=JobStatus.RUNNING).exists():
        broken.append("something was left running")
    # A killed worker cannot mark itself stopped; every worker that was stopped must have.
    unstopped = Worker.objects.filter(stopped_at__isnull=True).values_list("pid", flat=True)
    if set(unstopped) - tally.killed_pids:
        broken.append(f"workers {sorted(set(unstopped) - tally.killed_pids)} not marked stopped")

    memory, steady = tally.memory_report()
    if options.soak and not steady:
        broken.append("the worker that lived throughout grew by more than 10 %")
    print(f"chaos: faults {dict(tally.faults)}; workers killed {tally.kills}, replaced "
          f"{tally.replaced}")  # fmt: skip
    print(f"chaos: {memory}")
    print(f"chaos: jobs {dict(statuses)}; runs {runs:,}; runs cut by a kill {cut}; jobs run "
          f"more than once {twice}; overlapping runs {overlapping}")  # fmt: skip
    print(f"chaos: deliveries {dict(deliveries)}; requests {sum(requests.values()):,}; "
          f"attempts logged {sum(logged.values()):,} ({interrupted} interrupted); "
          f"requests without an attempt {unlogged}")  # fmt: skip
    for problem in broken:
        print(f"chaos: BROKEN: {problem}")
    print("chaos: every invariant held" if not broken else "chaos: FAILED")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
