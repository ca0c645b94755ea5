"""``runworker`` processes started the way a user starts them, for the benchmarks that
measure the product as it runs: ``python manage.py runworker --concurrency N`` in a shell.

Each is a fresh interpreter (no fork of this process, no worker on a thread of it), with
the project's settings: the settings module this benchmark runs with, through
``workerside/outbox_bench_settings.py``, which changes only ``OUTBOX["WAKE"]``, a queue's
limits, the database's name (the one this process uses) and ``DEBUG`` (off). Its
``manage.py`` is this project's, or another checkout's (``--worker-dir``), whose own
``django_outbox`` then runs the jobs.

A benchmark waits until every worker has registered and said it started, then lets them
settle into their idle wait before it sends the first job; at the end it stops them with
SIGTERM, as a deployment does, and records how each exited.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from django.conf import settings
from django.db import connections, router

import django_outbox
from django_outbox.models import Worker
from outbox_bench.workerside import DIRECTORY as WORKERSIDE


def project_dir() -> Path:
    """The directory of the manage.py that starts the workers by default: the one this
    benchmark was started with, else the checkout django_outbox was imported from, else
    the current directory. (Not this package's: it is installed on its own.)"""
    candidates = []
    if Path(sys.argv[0]).name == "manage.py":
        candidates.append(Path(sys.argv[0]).resolve().parent)
    candidates += [Path(django_outbox.__file__).resolve().parent.parent, Path.cwd()]
    return next((c for c in candidates if (c / "manage.py").is_file()), Path.cwd())


#: The project: the directory of the manage.py that starts the workers by default.
PROJECT_DIR = project_dir()
#: Seconds a worker gets to register and say it started.
START_TIMEOUT = 60.0
#: Seconds a registered worker gets to log its start-up line (it says which wake-ups it
#: uses) before the benchmark goes on without it.
SAID_TIMEOUT = 10.0
#: Seconds a worker gets to exit after SIGTERM before it is killed (runworker's own
#: --shutdown-timeout is 30 s, for running jobs; an idle worker leaves at once).
STOP_TIMEOUT = 40.0
#: The worker's start-up line: "worker <id> started: … wake-ups: <name>".
_STARTED = re.compile(r"worker (\S+) started: .*wake-ups: (\S+)")


class WorkerStartError(RuntimeError):
    """A runworker process exited, or did not start, in time."""


def check_worker_dir(directory: Path) -> Path:
    """``directory`` as a checkout whose manage.py can start workers, or ValueError."""
    directory = directory.expanduser().resolve()
    if not (directory / "manage.py").is_file():
        raise ValueError(f"{directory} has no manage.py (a checkout of this project)")
    return directory


def import_bench_tasks() -> Any:
    """``outbox_bench_tasks``, imported by the name the workers import it by."""
    import importlib

    if str(WORKERSIDE) not in sys.path:
        sys.path.append(str(WORKERSIDE))
    return importlib.import_module("outbox_bench_tasks")


@dataclass(frozen=True, slots=True)
class Started:
    """One runworker process: how it was started, what it said, how it ended."""

    pid: int
    argv: list[str]
    cwd: str
    #: The wake-ups the worker said it uses (its start-up line), or None if it said nothing.
    wake: str | None
    #: Its exit status after SIGTERM (-9: killed after STOP_TIMEOUT s).
    exit_code: int | None


def bench_environment(
    *,
    wake: str | None = None,
    queue_limits: dict[str, dict[str, Any]] | None = None,
    loopback_webhooks: bool = False,
) -> dict[str, str]:
    """The environment of a benchmark's runworker process: this process's, with the
    project's settings wrapped by ``workerside/outbox_bench_settings.py`` (see there)."""
    # The environment's, as manage.py set it: inside override_settings (the benchmark
    # runs with DEBUG off) settings.SETTINGS_MODULE reads None.
    base = os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE
    if not base:
        raise WorkerStartError(
            "the workers take this process's settings module, and there is none "
            "(settings.configure() was used): run the benchmark with DJANGO_SETTINGS_MODULE"
        )
    alias = router.db_for_write(Worker)
    paths = [str(WORKERSIDE), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "outbox_bench_settings",
        "OUTBOX_BENCH_BASE_SETTINGS": base,
        "OUTBOX_BENCH_DATABASE": json.dumps([alias, str(connections[alias].settings_dict["NAME"])]),
        "PYTHONPATH": os.pathsep.join(paths),
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("OUTBOX_BENCH_WAKE", "OUTBOX_BENCH_QUEUES", "OUTBOX_BENCH_LOOPBACK_WEBHOOKS"):
        env.pop(name, None)
    if wake is not None:
        env["OUTBOX_BENCH_WAKE"] = wake
    if queue_limits:
        env["OUTBOX_BENCH_QUEUES"] = json.dumps(queue_limits)
    if loopback_webhooks:
        env["OUTBOX_BENCH_LOOPBACK_WEBHOOKS"] = "1"
    return env


class Runworkers:
    """``count`` runworker processes of ``concurrency`` threads on ``queue``, started on
    entry (and settled), stopped on exit."""

    def __init__(
        self,
        count: int,
        concurrency: int,
        queue: str,
        *,
        wake: str | None = None,
        queue_limits: dict[str, dict[str, Any]] | None = None,
        worker_dir: Path = PROJECT_DIR,
        settle: float = 2.0,
    ) -> None:
        self.count = count
        self.concurrency = concurrency
        self.queue = queue
        self.wake = wake
        self.queue_limits = queue_limits
        self.worker_dir = worker_dir
        self.settle = settle
        self.argv = [
            sys.executable,
            "manage.py",
            "runworker",
            "--concurrency",
            str(concurrency),
            "--queues",
            queue,
        ]
        self.processes: list[subprocess.Popen[bytes]] = []
        self.wakes: dict[int, str | None] = {}
        self.exit_codes: dict[int, int] = {}
        #: The end of the log of each worker that did not exit with status 0.
        self.bad_exits: dict[int, str] = {}
        self._logs = tempfile.TemporaryDirectory(prefix="outbox-bench-workers-")

    def environment(self) -> dict[str, str]:
        return bench_environment(wake=self.wake, queue_limits=self.queue_limits)

    def __enter__(self) -> Runworkers:
        env = self.environment()
        launched = time.time()
        try:
            for number in range(self.count):
                with open(self._log_path(number), "wb") as log:  # the child keeps its own
                    self.processes.append(
                        subprocess.Popen(
                            self.argv,
                            cwd=self.worker_dir,
                            env=env,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            # Its own session: a Ctrl-C at the benchmark reaches the
                            # benchmark, which stops its workers the way a deployment does.
                            start_new_session=True,
                        )
                    )
            self._wait_until_started(launched)
            time.sleep(self.settle)  # let them settle into their idle wait
            self.check_alive()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def started(self) -> list[Started]:
        return [
            Started(
                pid=process.pid,
                argv=list(self.argv),
                cwd=str(self.worker_dir),
                wake=self.wakes.get(process.pid),
                exit_code=self.exit_codes.get(process.pid),
            )
            for process in self.processes
        ]

    def log(self, number: int) -> str:
        try:
            return self._log_path(number).read_text(errors="replace")
        except OSError:
            return ""

    def _log_path(self, number: int) -> Path:
        return Path(self._logs.name) / f"runworker-{number}.log"

    def _wait_until_started(self, launched: float) -> None:
        """Until each process has its row in the worker registry (in this database) and
        has logged its start-up line; a project that does not log it is given
        SAID_TIMEOUT s after the rows."""
        deadline = time.monotonic() + START_TIMEOUT
        hostname = socket.gethostname()
        all_registered_at: float | None = None
        registered: set[int] = set()
        while True:
            self.check_alive()
            if all_registered_at is None:
                rows = Worker.objects.filter(
                    pid__in=self.pids, hostname=hostname, stopped_at__isnull=True
                ).values_list("pid", "started_at")
                registered = {pid for pid, at in rows if at.timestamp() >= launched - 1}
                if len(registered) == self.count:
                    all_registered_at = time.monotonic()
            for number, process in enumerate(self.processes):
                match = _STARTED.search(self.log(number))
                if match:
                    self.wakes[process.pid] = match[2].rstrip(",")
            if all_registered_at is not None and (
                len(self.wakes) == self.count or time.monotonic() > all_registered_at + SAID_TIMEOUT
            ):
                return
            if time.monotonic() > deadline:
                missing = [
                    number
                    for number, process in enumerate(self.processes)
                    if process.pid not in registered
                ]
                raise WorkerStartError(
                    f"runworker did not register in this database within {START_TIMEOUT:.0f} s "
                    f"(pids {', '.join(str(self.processes[n].pid) for n in missing)}); "
                    f"its log:\n{self._tail(missing[0] if missing else 0)}"
                )
            time.sleep(0.05)

    def check_alive(self) -> None:
        for number, process in enumerate(self.processes):
            if process.poll() is not None:
                raise WorkerStartError(
                    f"runworker (pid {process.pid}, in {self.worker_dir}) exited with status "
                    f"{process.returncode} before the benchmark ended; its log:\n"
                    f"{self._tail(number)}"
                )

    def _tail(self, number: int) -> str:
        return self.log(number)[-3000:]

    def stop(self) -> None:
        """SIGTERM to every worker, then wait for each (killed after STOP_TIMEOUT s)."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for number, process in enumerate(self.processes):
            if process.pid in self.exit_codes:
                continue
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
            self.exit_codes[process.pid] = process.returncode
            if process.returncode != 0:
                self.bad_exits[process.pid] = self._tail(number)
        self._logs.cleanup()


class Enqueuer:
    """The process that enqueues the jobs (``workerside/outbox_bench_enqueue.py``): started
    with the workers' settings from ``directory`` (by default the workers' checkout), like
    a web process of the same site, so the wake-up sender that runs on commit is that
    checkout's. It enqueues on ``go()``."""

    def __init__(
        self, workers: Runworkers, config: dict[str, Any], directory: Path | None = None
    ) -> None:
        self.workers = workers
        self.config = config
        self.directory = directory or workers.worker_dir
        self.process: subprocess.Popen[bytes] | None = None
        self._lines: Queue[bytes] = Queue()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by __exit__)

    def __enter__(self) -> Enqueuer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "outbox_bench_enqueue"],
            cwd=self.directory,
            env=self.workers.environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()
        try:
            self.process.stdin.write(json.dumps(self.config).encode() + b"\n")
            self.process.stdin.flush()
            self._expect(b"ready", START_TIMEOUT)
        except BaseException:
            self.__exit__()
            raise
        return self

    def go(self, timeout: float) -> dict[str, Any]:
        """Enqueue on the schedule; the jobs' keys and when each enqueue returned."""
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()
        line = self._expect(b"{", timeout)
        result: dict[str, Any] = json.loads(line)
        return result

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            if self.process.stdin is not None:
                with contextlib.suppress(OSError):
                    self.process.stdin.close()
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()

    def _read(self, stream: Any) -> None:
        for line in iter(stream.readline, b""):
            self._lines.put(line)

    def _expect(self, start: bytes, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            except Empty:
                line = b""
            if line.startswith(start):
                return line
            assert self.process is not None
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._log.seek(0)
                output = self._log.read().decode(errors="replace")[-3000:]
                state = (
                    f"exited with status {self.process.returncode}"
                    if self.process.poll() is not None
                    else f"said nothing for {timeout:.0f} s"
                )
                hint = ""
                if self.directory != PROJECT_DIR:
                    hint = (
                        f"\n(Code older than this database's schema cannot enqueue into it: "
                        f"migrate a database of its own with {self.directory}/manage.py, or "
                        f"enqueue with this checkout's code: --enqueuer-dir {PROJECT_DIR}.)"
                    )
                raise WorkerStartError(
                    f"the enqueuing process (python -m outbox_bench_enqueue, in "
                    f"{self.directory}) {state}; its output:\n{output}{hint}"
                )
