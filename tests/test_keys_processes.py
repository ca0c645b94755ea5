"""Concurrency keys, sequences and ordered webhooks with real worker processes (issue #23).

Each test starts two (or three) ``manage.py runworker`` processes of four threads against
the test database and enqueues from this process, as an application does. What the jobs
did is read back from what they recorded: ``tests.models.Execution`` (one row per run,
its start and end, written by the job itself) and the webhook receiver's log.

Test settings: LEASE_SECONDS=3, HEARTBEAT_SECONDS=0.5; the workers here look for expired
leases every second (OUTBOX_TEST_STALLED_CHECK_SECONDS=1), so a killed worker's jobs run
again about 3 to 4 s after the kill.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial
from itertools import pairwise
from typing import Any

import django
import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from django_outbox import conf, enqueue_many, webhooks
from django_outbox.jobs import keys
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Delivery, DeliveryStatus, Job, JobStatus
from django_outbox.models import Worker as WorkerRow
from tests.conftest import WorkerProcess, wait_until
from tests.models import Execution
from tests.receiver import Answer, Received
from tests.tasks import in_sequence, in_sequence_slow_first, per_customer

#: These start worker processes for about 20 s per database: CI runs them in the Django 6.1
#: row only (the 5.2 row tests the same engine code, and CI must stay under 25 minutes).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(django.VERSION < (6, 0), reason="run in the Django 6.1 row only"),
]

StartWorker = Callable[..., WorkerProcess]

#: Threads per worker process.
THREADS = 4
#: Look for expired leases every second, not every 5 s: a killed worker's jobs come back
#: sooner.
QUICK_RESCUE = {"OUTBOX_TEST_STALLED_CHECK_SECONDS": "1"}
#: Generous: CI runs the suite under load.
SETTLE_SECONDS = 180
ENDED = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]


def start_workers(
    start_worker: StartWorker, count: int, *args: str, threads: int = THREADS
) -> list[WorkerProcess]:
    """``count`` runworker processes of ``threads`` threads, returned once each has
    registered (so none of them has the work to itself while the others start)."""
    workers = [
        start_worker("--concurrency", str(threads), *args, extra_env=QUICK_RESCUE)
        for _ in range(count)
    ]
    for worker in workers:
        wait_until(partial(registered, worker), timeout=60, what=f"runworker {worker.pid} to start")
    return workers


def registered(worker: WorkerProcess) -> bool:
    if worker.process.poll() is not None:
        pytest.fail(f"runworker {worker.pid} exited early; its log:\n{worker.log()}")
    return WorkerRow.objects.filter(pid=worker.pid, stopped_at__isnull=True).exists()


def pid_of(worker_id: str) -> int:
    """The process of a worker id (``host:pid:random``, worker/loop.py new_worker_id)."""
    return int(worker_id.rsplit(":", 2)[1])


def processes_that_ran(jobs: Iterable[Job]) -> set[int]:
    return {pid_of(worker_id) for job in jobs for worker_id in job.worker_ids}


def all_ended() -> bool:
    return not Job.objects.exclude(status__in=ENDED).exists()


def statuses() -> set[str]:
    return set(Job.objects.values_list("status", flat=True))


def most_at_once(intervals: Iterable[tuple[datetime, datetime]]) -> int:
    """The most intervals that overlap at one instant (one ending as another starts do
    not overlap)."""
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda event: (event[0], event[1]),
    )
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def interval(run: Execution) -> tuple[datetime, datetime]:
    assert run.finished is not None, f"{run} never finished"
    return run.started, run.finished


# -- 1. a key's limit holds across processes ----------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("limit", [1, 2])
def test_a_concurrency_keys_limit_is_never_exceeded_across_worker_processes(
    start_worker: StartWorker, limit: int
) -> None:
    """3 customers x 15 jobs of 0.2 s, at most ``limit`` per customer at once, on two
    processes of four threads, one serving the queue "default", the other "slow": each
    customer's jobs alternate between the two queues, so every customer's jobs run on
    both processes, and its turns pass from one to the other."""
    workers = start_workers(start_worker, 1, "--queues", "default")
    workers += start_workers(start_worker, 1, "--queues", "slow")
    customers, jobs_each = (1, 2, 3), 15
    limited = per_customer.using(concurrency_limit=limit)
    for n in range(jobs_each):  # one by one, while the workers run
        for customer in customers:
            limited.using(queue_name=("default", "slow")[n % 2]).enqueue(customer, n, 0.2)
    wait_until(all_ended, timeout=SETTLE_SECONDS, what="every job to end")

    assert statuses() == {JobStatus.SUCCEEDED}
    runs = list(Execution.objects.all())
    assert len(runs) == len(customers) * jobs_each  # one run each: nothing ran twice
    for customer in customers:
        mine = [interval(run) for run in runs if run.key.startswith(f"{customer}:")]
        assert len(mine) == jobs_each
        assert most_at_once(mine) <= limit, f"customer {customer}: over the limit of {limit}"
    # The limit is per key: customers ran beside each other, beyond one key's limit.
    assert most_at_once([interval(run) for run in runs]) > limit
    spans = {
        customer: [interval(run) for run in runs if run.key.startswith(f"{customer}:")]
        for customer in customers
    }
    # Each customer's first run began before every other customer's last run ended.
    for customer in customers:
        first_start = min(start for start, _ in spans[customer])
        assert all(first_start < max(end for _, end in spans[other]) for other in customers)
    # Each customer's jobs ran on both processes: the limit held across them.
    for customer in customers:
        ran_on = {pid_of(run.worker) for run in runs if run.key.startswith(f"{customer}:")}
        assert ran_on == {worker.pid for worker in workers}, customer


# -- 2. sequences keep their order across retries and a kill -9 ---------------------------

ORDERS = 4
STEPS = 8
#: The step whose first run is killed with its process: it would take this long.
SLOW = (0, 3)
SLOW_SECONDS = 30.0
#: Each job may lose one attempt to the kill (running or claimed by the killed process),
#: on top of its planned failures: no job runs out of attempts.
MAX_ATTEMPTS = 5


def failures_of(order: int, step: int) -> int:
    """How many first runs of a step fail: two steps of each order fail once or twice."""
    if (order, step) == SLOW:
        return 0
    if step == (order + 1) % STEPS:
        return 2
    if step == (order + 5) % STEPS:
        return 1
    return 0


def step_of(run: Execution) -> tuple[int, int]:
    order, step = run.key.split(":")
    return int(order), int(step)


def succeeded(run: Execution) -> bool:
    """The run returned (in_sequence fails its first ``failures`` attempts)."""
    return run.finished is not None and run.attempt > failures_of(*step_of(run))


@pytest.mark.e2e
def test_sequences_keep_their_order_across_retries_and_a_kill_9(
    start_worker: StartWorker,
) -> None:
    """4 orders of 8 steps on two processes; two steps of each order fail once or twice
    first; the process running a slow step is killed with SIGKILL mid-run, and a new one
    started; the rerun of the killed step is quick. About 10 s."""
    workers = start_workers(start_worker, 2, "--queues", "default")
    steps = in_sequence.using(max_attempts=MAX_ATTEMPTS)
    for step in range(STEPS):
        for order in range(ORDERS):
            if (order, step) == SLOW:
                in_sequence_slow_first.enqueue(order, step, SLOW_SECONDS)
            else:
                steps.enqueue(order, step, failures=failures_of(order, step), seconds=0.02)

    slow_key = "{}:{}".format(*SLOW)
    slow_run = wait_until(
        lambda: Execution.objects.filter(key=slow_key).first(),
        timeout=SETTLE_SECONDS,
        what=f"the slow step {slow_key} to start",
    )
    victim = next(w for w in workers if w.pid == pid_of(slow_run.worker))
    victim.send(signal.SIGKILL)
    assert victim.wait(30) == -signal.SIGKILL
    killed_at = timezone.now()  # every run of the killed process ended by now
    slow_run.refresh_from_db()
    assert slow_run.finished is None, "the slow step finished before its process was killed"
    workers += start_workers(start_worker, 1, "--queues", "default")
    wait_until(all_ended, timeout=SETTLE_SECONDS, what="every job to end")

    assert statuses() == {JobStatus.SUCCEEDED}
    slow_job = Job.objects.get(pk=slow_run.job_id)
    assert slow_job.attempts >= 2
    lost = [error["exception_class_path"] for error in slow_job.errors]
    assert "django_outbox.exceptions.WorkerLost" in lost
    assert pid_of(slow_job.worker_ids[-1]) != victim.pid  # the rerun ran elsewhere

    runs = list(Execution.objects.order_by("started", "id"))
    # Only runs of the killed process never finished, and they began before the kill.
    for run in runs:
        if run.finished is None:
            assert pid_of(run.worker) == victim.pid, run
            assert run.started < killed_at, run

    def end(run: Execution) -> datetime:
        return run.finished if run.finished is not None else killed_at

    for order in range(ORDERS):
        mine = [run for run in runs if step_of(run)[0] == order]
        # One at a time: each run starts once the one before it ended (a killed run
        # ended when its process died).
        for before, after in pairwise(mine):
            assert after.started >= end(before), (order, before.key, after.key)
        # In order: the steps run in enqueue order, each after the previous one succeeded.
        assert [step_of(run)[1] for run in mine] == sorted(step_of(run)[1] for run in mine)
        first_success: dict[int, Execution] = {}
        for run in mine:
            if succeeded(run):
                first_success.setdefault(step_of(run)[1], run)
        assert sorted(first_success) == list(range(STEPS)), order
        for step in range(1, STEPS):
            previous = first_success[step - 1]
            assert previous.finished is not None
            assert first_success[step].started >= previous.finished, (order, step)
            assert all(
                run.started >= previous.finished for run in mine if step_of(run)[1] == step
            ), (order, step)

    # Each job ran its planned failures and one success; any more came from the kill.
    for job in Job.objects.all():
        order, step = job.args[0], job.args[1]
        planned = failures_of(order, step) + 1
        assert job.attempts >= planned
        ran = [run for run in runs if run.job_id == job.pk]
        assert sum(succeeded(run) for run in ran) >= 1
        if job.attempts > planned or len(ran) > planned:
            assert victim.pid in {pid_of(w) for w in job.worker_ids}, (order, step)
    # The killed process ran steps before the kill, and the others after it.
    assert victim.pid in processes_that_ran(Job.objects.all())


# -- 3. ordered webhooks --------------------------------------------------------------------


def data(request: Received) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(request.body)["data"]
    return found


def arrivals(receiver: Any, path: str, key: str) -> list[int]:
    """The numbers of the messages of ``key`` that ``path`` answered 200 to, in order."""
    return [data(r)["n"] for r in receiver.at(path) if data(r)["key"] == key and r.status == 200]


def deliveries_settled() -> bool:
    pending = Delivery.objects.filter(status=DeliveryStatus.PENDING).exists()
    return not pending and all_ended()


@pytest.mark.e2e
def test_ordered_webhooks_arrive_in_order_per_key_on_worker_processes(
    start_worker: StartWorker, receiver: Any
) -> None:
    """Two endpoints, 3 keys x 6 messages, sent one by one while two processes deliver;
    the first message of key "a" fails three times at /one (slowly, 0.4 s each), then
    succeeds. The receiver takes 0.1 s per answer, and each process holds two deliveries
    at most (``--concurrency 2 --batch-size 2``): the six sequences (3 keys x 2 endpoints)
    are more than one process can hold, so both deliver. About 5 s."""
    failures = 3

    def decide(request: Received) -> Answer | None:
        # Called under the receiver's lock: reads ``receiver.received`` directly.
        if request.path == "/one" and data(request) == {"key": "a", "n": 0}:
            tries = [r for r in receiver.received if r.path == "/one" and data(r) == data(request)]
            if len(tries) <= failures:
                return Answer(500, delay=0.4)
        return None

    receiver.decide = decide
    for path in ("/one", "/two"):
        receiver.script(path, Answer(delay=0.1))
        webhooks.create_endpoint(receiver.url(path))
    queue = conf.get().WEBHOOKS.QUEUE
    workers = start_workers(start_worker, 2, "--queues", queue, "--batch-size", "2", threads=2)
    ordering_keys = ("a", "b", "c")
    for n in range(6):
        for key in ordering_keys:
            with transaction.atomic():
                webhooks.send("order.changed", {"key": key, "n": n}, ordering_key=key)
    wait_until(deliveries_settled, timeout=SETTLE_SECONDS, what="every delivery to settle")

    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.SUCCEEDED}
    for path in ("/one", "/two"):
        for key in ordering_keys:
            assert arrivals(receiver, path, key) == list(range(6)), (path, key)
    one, two = receiver.at("/one"), receiver.at("/two")
    assert [r.status for r in one if data(r) == {"key": "a", "n": 0}] == [500] * failures + [200]
    # The other messages went through at their first try.
    assert len(one) == 18 + failures and all(r.status == 200 for r in two) and len(two) == 18
    a_recovered = next(r.started for r in one if data(r)["key"] == "a" and r.status == 200)
    # While "a" waited for its retries at /one, the other keys went on there, and "a" went
    # on at /two.
    assert any(data(r)["key"] != "a" and data(r)["n"] > 0 for r in one if r.started < a_recovered)
    assert any(data(r) == {"key": "a", "n": 1} for r in two if r.started < a_recovered)
    # Both processes delivered.
    jobs = Job.objects.filter(queue=queue)
    assert jobs.count() >= 36
    assert processes_that_ran(jobs) == {worker.pid for worker in workers}


# -- a deadlock the tests above ran into -----------------------------------------------------


def statement_of(thread_id: int) -> str:
    """What the database connection ``thread_id`` is running now ("" if nothing)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT info FROM information_schema.processlist WHERE id = %s", [thread_id])
        row = cursor.fetchone()
    return str(row[0] or "") if row else ""


@pytest.mark.skipif(connection.vendor != "mysql", reason="InnoDB's row locks (MariaDB, MySQL)")
def test_two_keys_given_turns_at_once_do_not_deadlock() -> None:
    """A worker storing the end of two jobs of one key (jobs/complete.py: the outcomes,
    then ``keys.ended``) while a request enqueues jobs of other keys: neither touches the
    other's key, so neither may fail.

    Up to 274d12f, ``admit()`` locked the held jobs it queued with ``SELECT … WHERE id IN
    (…) AND status = 'held' FOR UPDATE`` (jobs/returning.py), which InnoDB reads, for two
    ids or more, through the (status, finished_at) index, locking every held job of every
    key on its way: the two transactions below deadlocked (1213) every time, and
    ``webhooks.send(ordering_key=...)`` failed so in 4 of 30 runs of this file under load
    while workers delivered. The request goes on once the worker's transaction is seen
    running its locking read (it then waits for the request's new rows, or is done)."""
    customer_3 = per_customer.using(concurrency_limit=2)
    running = [job_pk(customer_3.enqueue(3, n)) for n in range(2)]
    for n in range(2, 4):
        customer_3.enqueue(3, n)  # held behind them, committed
    errors: list[BaseException] = []
    worker_connection: list[int] = []

    def two_jobs_end() -> None:
        try:
            connection.ensure_connection()
            worker_connection.append(connection.connection.thread_id())
            with transaction.atomic():
                now = timezone.now()
                Job.objects.filter(pk__in=running).update(
                    status=JobStatus.SUCCEEDED, finished_at=now
                )
                keys.ended(
                    connection.alias, [(pk, "concurrency:customer-3") for pk in running], [], now
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    worker = threading.Thread(target=two_jobs_end)
    try:
        with transaction.atomic():  # a request
            in_sequence.enqueue(4, 0)  # queued
            in_sequence.enqueue(4, 1)  # held: its new row is locked until the commit
            worker.start()
            seen, deadline = 0, time.monotonic() + 10
            while seen < 3 and worker.is_alive() and time.monotonic() < deadline:
                locking = worker_connection and "FOR UPDATE" in statement_of(worker_connection[0])
                seen = seen + 1 if locking else 0
                time.sleep(0.05)
            # Two jobs of a key no one else uses, both admitted at once.
            enqueue_many(
                customer_3.using(concurrency_key="customer-5"), [((5, n), {}) for n in (0, 1)]
            )
    except BaseException as exc:
        errors.append(exc)
    worker.join(30)
    assert not errors, errors
    found = {tuple(args): status for args, status in Job.objects.values_list("args", "status")}
    assert found == {
        (3, 0): JobStatus.SUCCEEDED,
        (3, 1): JobStatus.SUCCEEDED,
        (3, 2): JobStatus.QUEUED,  # their turns came
        (3, 3): JobStatus.QUEUED,
        (4, 0): JobStatus.QUEUED,
        (4, 1): JobStatus.HELD,  # behind 4:0
        (5, 0): JobStatus.QUEUED,
        (5, 1): JobStatus.QUEUED,
    }


def job_pk(result: Any) -> int:
    return parse_result_id(result.id).pk
