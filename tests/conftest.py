from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_outbox.worker import Worker
from django_outbox.worker.loop import WorkerStats
from tests.factories import JobFactory, WorkerFactory

ROOT = Path(__file__).resolve().parent.parent
ALL_QUEUES = ["default", "emails", "reports", "slow"]


@pytest.fixture
def job_factory(db: None) -> type[JobFactory]:
    return JobFactory


@pytest.fixture
def worker_factory(db: None) -> type[WorkerFactory]:
    return WorkerFactory


@pytest.fixture
def run_worker(transactional_db: None) -> Callable[..., WorkerStats]:
    """Run a worker in this process until nothing is due (``burst``); returns its stats."""

    def run(**options: Any) -> WorkerStats:
        options.setdefault("queues", ALL_QUEUES)
        options.setdefault("burst", True)
        options.setdefault("concurrency", 2)
        return Worker(**options).run()

    return run


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
    import threading

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
    for _worker, thread in started:
        thread.join(20)
