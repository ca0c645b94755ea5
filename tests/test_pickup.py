"""No job waits for the stalled check: real `runworker` processes, jobs enqueued from
another process, the patterns users have (steady, quick, in bursts, in transactions).

Workers here look by themselves only every 30 s, so a job that started within a couple of
seconds of its enqueue was woken by a signal; one that waited for the stalled check shows
up as 30 s. The tight latency targets live in `outbox_bench latency`, not here.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta

import django
import pytest
from django.db import connection

from tests.conftest import ROOT, wait_until
from tests.models import Execution
from tests.test_wake import require, worker_env

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # The worker's own timing, the same under both Django versions: CI runs it in the
    # Django 6.1 row only (it must stay under 25 minutes).
    pytest.mark.skipif(django.VERSION < (6, 0), reason="run in the Django 6.1 row only"),
]

#: Far below the 30 s stalled check, far above a loaded CI machine's hiccup.
PROMPT = timedelta(seconds=2.5)

ENQUEUE = """
import json, sys, time
import django
django.setup()
from django.db import transaction
from tests import tasks
count, gap, burst, in_transaction, queue = json.loads(sys.argv[1])
task = tasks.record_run.using(queue_name=queue)
start = time.time()
for n in range(count):
    if in_transaction:
        with transaction.atomic():
            task.enqueue(f"job-{n}", seconds=float(sys.argv[2]))
    else:
        task.enqueue(f"job-{n}", seconds=float(sys.argv[2]))
    print(json.dumps([f"job-{n}", time.time()]), flush=True)
    if burst and (n + 1) % burst == 0:
        time.sleep(0.3)
    elif not burst:  # on a fixed beat, as a steady stream of requests would be
        time.sleep(max(0.0, start + (n + 1) * gap - time.time()))
"""


def enqueue_elsewhere(
    mode: str,
    count: int,
    gap: float = 0.0,
    burst: int = 0,
    in_transaction: bool = False,
    queue: str = "slow",
    seconds: float = 0.0,
) -> dict[str, datetime]:
    """Enqueue from another process, each job in its own commit; returns, per job key, the
    moment its enqueue returned there."""
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "OUTBOX_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "OUTBOX_TEST_WAKE": mode,
    }
    spec = json.dumps([count, gap, burst, in_transaction, queue])
    out = subprocess.run(
        [sys.executable, "-c", ENQUEUE, spec, str(seconds)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    from django.utils import timezone

    returned = {}
    for line in out.stdout.splitlines():
        key, at = json.loads(line)
        returned[key] = datetime.fromtimestamp(at, tz=timezone.get_current_timezone())
    return returned


def runs(count: int) -> list[Execution]:
    return wait_until(
        lambda: (
            list(Execution.objects.order_by("started"))
            if Execution.objects.filter(finished__isnull=False).count() >= count
            else None
        ),
        timeout=20,
        what=f"{count} jobs to run (one waited for the 30 s stalled check?)",
    )


MODES = ["postgres", "redis"]
PATTERNS = {
    "one thread, 50 ms apart": dict(threads=1, count=30, gap=0.05),
    "four threads, 5 ms apart, in transactions": dict(
        threads=4, count=60, gap=0.005, in_transaction=True
    ),
    "four threads, bursts of 20": dict(threads=4, count=60, burst=20),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_no_job_waits_for_the_stalled_check(start_worker, mode, pattern):
    require(mode)
    shape = dict(PATTERNS[pattern])
    threads = shape.pop("threads")
    worker = start_worker(
        "--queues", "slow", "--concurrency", str(threads), extra_env=worker_env(mode)
    )
    wait_until(lambda: f"wake-ups: {mode}" in worker.log(), timeout=20, what="the worker")
    returned = enqueue_elsewhere(mode, **shape)
    late = {
        run.key: run.started - returned[run.key]
        for run in runs(len(returned))
        if run.started - returned[run.key] > PROMPT
    }
    assert not late, (late, worker.log())
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_freed_slot_of_a_limited_queue_is_taken_at_once(start_worker, mode):
    """One job at a time across three workers of four threads: each job starts as the one
    before it ends, not at another worker's stalled check."""
    require(mode)
    env = worker_env(mode) | {"OUTBOX_TEST_LIMITED": "1"}
    workers = [
        start_worker("--queues", "limited", "--concurrency", "4", extra_env=env) for _ in range(3)
    ]
    for worker in workers:
        wait_until(lambda w=worker: f"wake-ups: {mode}" in w.log(), timeout=20, what="workers")
    enqueue_elsewhere(mode, count=8, queue="limited", seconds=0.2)
    done = runs(8)
    for before, after in itertools.pairwise(done):
        assert before.finished <= after.started, "the limit of 1 was broken"
        assert after.started - before.finished < PROMPT, [
            (r.started, r.finished, r.worker) for r in done
        ]
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0
