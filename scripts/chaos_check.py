"""The chaos run's record and its verdict: what the faults did, then the invariants.

Kept apart from the driver (``chaos.py``) so that what is checked reads in one place,
whichever database the run used.
"""

from __future__ import annotations

import argparse
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.receiver import Receiver


@dataclass
class Tally:
    """What the driver did and saw, which the checks need: a run cut by a kill is no
    overlap, a worker that exited on its own is a failure."""

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


def _pid(worker_id: str) -> int:
    """The pid in a worker id (``host:pid:random``)."""
    return int(worker_id.split(":")[-2])


def check(receiver: Receiver, tally: Tally, options: argparse.Namespace, left_running: int) -> int:
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
