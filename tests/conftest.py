from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_outbox.worker import Worker
from django_outbox.worker.loop import WorkerStats
from django_outbox.worker.pool import Pool
from tests.factories import JobFactory, WorkerFactory

ROOT = Path(__file__).resolve().parent.parent
ALL_QUEUES = ["default", "emails", "reports", "slow"]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> None:
    """With OUTBOX_TEST_PARTITIONED=1 (PostgreSQL), the tests run against a job table
    partitioned by status and day (``manage.py outbox_partition``): what works on one
    table must work on it too."""
    if os.environ.get("OUTBOX_TEST_PARTITIONED") != "1":
        return
    from django_outbox.db import partitions

    with django_db_blocker.unblock():
        if not partitions.supported(connection.alias):
            pytest.exit("OUTBOX_TEST_PARTITIONED=1 needs PostgreSQL (DATABASE_URL)", 2)
        partitions.partition(connection, "django_outbox_job")


@pytest.fixture
def job_factory(db: None) -> type[JobFactory]:
    return JobFactory


@pytest.fixture
def worker_factory(db: None) -> type[WorkerFactory]:
    return WorkerFactory


#: A worker's threads: its pool's job threads (outbox-job-N, worker/pool.py), and when it
#: runs on a thread, that thread (outbox-worker-ID), its listener, pruner and scheduler.
THREAD_PREFIX = "outbox-"
#: How long a test's end waits for the threads of a stopped worker to leave: they leave at
#: once (``Worker.run()`` returns without waiting for its job threads); one still there is
#: busy.
THREAD_GRACE_SECONDS = 0.2
#: How long it then waits for a leaked one, so that it does not run on into later tests.
LEAK_WAIT_SECONDS = 10.0


def thread_report(threads: list[threading.Thread]) -> str:
    """Each thread's name and where it is now (its stack)."""
    frames = sys._current_frames()
    parts = []
    for thread in threads:
        frame = frames.get(thread.ident) if thread.ident is not None else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "  (gone)\n"
        parts.append(f"{thread.name}:\n{stack}")
    return "\n".join(parts)


def stop_pool(pool: Pool, timeout: float = 10.0) -> None:
    """Close ``pool`` and wait until its threads have left, jobs that ran over their
    timeout included (``Worker.run()`` and ``Pool.shutdown()`` do not wait for them): a
    thread still running when its test ends runs on in the next test, against that test's
    database or none. Fails, naming where they are, if they do not leave in ``timeout``."""
    pool.shutdown()
    deadline = time.monotonic() + timeout
    for thread in pool._threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [thread for thread in pool._threads if thread.is_alive()]
    if alive:
        pytest.fail(
            f"{len(alive)} job thread(s) still running {timeout:g} s after their pool was "
            f"shut down:\n{thread_report(alive)}"
        )


#: Threads already reported, so that one leak fails one test, not every later one.
_reported: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def no_worker_thread_outlives_its_test() -> Iterator[None]:
    """Fail a test that leaves a worker's threads running: they would run on during later
    tests (claiming their jobs, holding database sessions, or hitting pytest-django's
    "Database access not allowed" in a test without the database).

    Threads of a stopped worker get a moment to leave; one still there after that has
    leaked. Costs one ``threading.enumerate()`` when none is left."""
    yield
    running = [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith(THREAD_PREFIX) and thread not in _reported
    ]
    if not running:
        return
    deadline = time.monotonic() + THREAD_GRACE_SECONDS
    for thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))
    leaked = [thread for thread in running if thread.is_alive()]
    if not leaked:
        return
    _reported.update(leaked)
    report = thread_report(leaked)
    deadline = time.monotonic() + LEAK_WAIT_SECONDS
    for thread in leaked:
        thread.join(max(0.0, deadline - time.monotonic()))
    pytest.fail(
        f"this test left {len(leaked)} worker thread(s) running; stop the worker, join its "
        f"thread and its pool (tests.conftest.stop_pool) before the test ends:\n{report}"
    )


@pytest.fixture
def run_worker(transactional_db: None) -> Iterator[Callable[..., WorkerStats]]:
    """Run a worker in this process until nothing is due (``burst``); returns its stats.

    Its job threads are waited for when the test ends, before its database is emptied:
    one stuck in a job that ran over its timeout runs on after ``run()`` returns."""
    workers: list[Worker] = []

    def run(**options: Any) -> WorkerStats:
        options.setdefault("queues", ALL_QUEUES)
        options.setdefault("burst", True)
        options.setdefault("concurrency", 2)
        worker = Worker(**options)
        workers.append(worker)
        return worker.run()

    yield run
    for worker in workers:
        stop_pool(worker.pool)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what or predicate}")


class WorkerProcess:
    """A real ``manage.py runworker`` subprocess against the test database."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runworker", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # signals from the test reach only this worker
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"runworker did not exit within {timeout:.0f} s; log:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self._log.close()


@pytest.fixture
def start_worker(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "OUTBOX_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "PYTHONUNBUFFERED": "1",
    }

    def start(*args: str, extra_env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(
            list(args), tmp_path / f"worker-{len(started)}.log", env | (extra_env or {})
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def receiver() -> Iterator[Any]:
    """A real HTTP webhook receiver on 127.0.0.1 (see tests/receiver.py)."""
    from tests.receiver import Receiver

    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def webhook_worker(transactional_db: None) -> Iterator[Callable[..., Any]]:
    """Start a worker for the webhooks queue on a thread; it stops when the test ends."""
    from django_outbox.worker.process import start_in_thread

    started: list[tuple[Worker, threading.Thread]] = []

    def start(concurrency: int = 4, queues: list[str] | None = None) -> Worker:
        worker = Worker(queues=queues or ["webhooks"], concurrency=concurrency)
        thread = start_in_thread(worker)
        assert worker.ready.wait(15), "the worker did not start"
        started.append((worker, thread))
        return worker

    yield start
    for worker, _thread in started:
        worker.request_stop("test done")
    for worker, thread in started:
        thread.join(20)
        stop_pool(worker.pool)
