"""``runworker --reload``: in development, a worker that starts again when the code
changes, as ``runserver`` does, without losing a job.

The process started from the shell becomes the reloader. It runs the worker in a child
process (the same command line) and starts a new one each time the child exits with
RESTART_STATUS. The child watches the source file of every module it has imported
(Django's autoreloader lists them): with watchfiles, when installed, it is told of a
change at once; without, it looks at their times once a second, as Django's
``StatReloader`` does. On a change the
child drains its worker (the running jobs finish and are written, the claimed ones go
back to the queue) and exits with RESTART_STATUS.

A child that fails to start (the file just saved does not import) is started again once
a file the reloader itself imported changes. SIGTERM or SIGINT stops the child as it
stops a worker (a second SIGINT kills it) and then the reloader, with the child's status.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from django.utils import autoreload

from django_outbox.worker.supervisor import REPLACE_STATUS

logger = logging.getLogger("django_outbox.worker")

#: Set in the child's environment: this process runs the worker and watches the files.
CHILD_ENV = "OUTBOX_RELOADER_CHILD"
#: The child's exit status that asks the reloader for a fresh child: the one a worker
#: under the supervisor exits with to be replaced, which the reloader honours alike.
RESTART_STATUS = REPLACE_STATUS


def is_child() -> bool:
    return os.environ.get(CHILD_ENV) == "true"


def reloader_pid() -> int | None:
    """The reloader's pid, in its child (the worker stops by itself if it goes away)."""
    return os.getppid() if is_child() else None


# -- the files ---------------------------------------------------------------------------


def watcher_name() -> str:
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        return "polling once a second (pip install watchfiles to be told at once)"
    return "watchfiles"


def modified_times(files: Iterable[Path]) -> dict[Path, float | None]:
    """The modification time of each file (None: it is gone)."""
    times: dict[Path, float | None] = {}
    for path in files:
        try:
            times[path] = path.stat().st_mtime
        except OSError:
            times[path] = None
    return times


def wait_for_change(
    stop: threading.Event, seen: dict[Path, float | None] | None = None
) -> Path | None:
    """Block until the source file of an imported module changes (its path) or ``stop``
    is set (None). ``seen``: the files' times when the caller started looking (a change
    since then counts, even one made before the watch was in place); modules imported
    while it waits are watched from when it first sees them."""
    seen = dict(seen or {})
    try:
        import watchfiles
    except ImportError:
        return _poll_for_change(stop, seen)
    while not stop.is_set():
        files = autoreload.iter_all_python_module_files()
        for path, at in modified_times(files - seen.keys()).items():
            seen[path] = at
        folders = sorted({path.parent for path in files if path.parent.is_dir()})
        in_place = False
        for changes in watchfiles.watch(
            *folders,
            watch_filter=None,
            debounce=200,
            stop_event=stop,
            rust_timeout=500,
            yield_on_timeout=True,
            raise_interrupt=False,
            recursive=False,
        ):
            for _change, name in sorted(changes):
                if Path(name) in files:
                    return Path(name)
            if not in_place:  # the watch is in place: what changed before it was?
                in_place = True
                for path, at in modified_times(files).items():
                    if at != seen[path]:
                        return path
            if autoreload.iter_all_python_module_files() != files:
                break  # modules imported since: watch their folders too
    return None


def _poll_for_change(stop: threading.Event, seen: dict[Path, float | None]) -> Path | None:
    """Without watchfiles: the files' times once a second, as Django's StatReloader."""
    while not stop.is_set():
        files = autoreload.iter_all_python_module_files()
        for path, at in modified_times(files).items():
            if seen.setdefault(path, at) != at:
                return path
        stop.wait(1.0)
    return None


class Watcher:
    """On a thread of the child: calls ``on_change(path)`` once, at the first change of a
    file since ``start()``."""

    def __init__(self, on_change: Callable[[Path], None]) -> None:
        self.on_change = on_change
        self.changed: Path | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outbox-reload", daemon=True)
        self._seen: dict[Path, float | None] = {}

    def start(self) -> None:
        self._seen = modified_times(autoreload.iter_all_python_module_files())
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        changed = wait_for_change(self._stop, self._seen)
        if changed is not None:
            self.changed = changed
            self.on_change(changed)


# -- the reloader ------------------------------------------------------------------------


def run_reloader() -> int:
    """Run the worker in a child process, again after every change; returns the status
    of the last child once it was told to stop (or stopped by itself)."""
    arguments = autoreload.get_child_arguments()
    environment = {**os.environ, CHILD_ENV: "true"}
    logger.info(
        "reloader %s: running the worker in a child process; restarting it when "
        "the code changes (%s)",
        os.getpid(),
        watcher_name(),
    )
    stopping = threading.Event()
    while True:
        # A change from now on starts a child that failed again, even one made while it
        # was failing.
        started = modified_times(autoreload.iter_all_python_module_files())
        child = subprocess.Popen(arguments, env=environment, close_fds=False)
        with _passing_on_signals(child, stopping):
            status = child.wait()
        if status == RESTART_STATUS and not stopping.is_set():
            # The code changed, or a thread got stuck in a timed-out job: a fresh one.
            logger.info("reloader %s: starting a fresh worker", os.getpid())
            continue
        if status == 0 or stopping.is_set():
            return 0 if status == RESTART_STATUS else status
        logger.error(
            "reloader %s: the worker exited with status %d; starting it again when a file changes",
            os.getpid(),
            status,
        )
        with _stopping_on_signals(stopping):
            changed = wait_for_change(stopping, started)
        if changed is None:
            return status
        logger.info("reloader %s: %s changed; starting the worker again", os.getpid(), changed)


@contextlib.contextmanager
def _passing_on_signals(child: subprocess.Popen[Any], stopping: threading.Event) -> Iterator[None]:
    """SIGTERM or SIGINT here: SIGTERM to the child, which drains. (A Ctrl-C reaches the
    child from the terminal too; a second one kills it, as it kills a worker.)"""
    interrupts = 0

    def handle(signum: int, frame: Any) -> None:
        nonlocal interrupts
        stopping.set()
        if signum == signal.SIGINT:
            interrupts += 1
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGKILL if interrupts > 1 else signal.SIGTERM)

    with _handling(handle):
        yield


@contextlib.contextmanager
def _stopping_on_signals(stopping: threading.Event) -> Iterator[None]:
    with _handling(lambda signum, frame: stopping.set()):
        yield


@contextlib.contextmanager
def _handling(handler: Callable[[int, Any], None]) -> Iterator[None]:
    previous = {
        signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for signum, handled in previous.items():
            signal.signal(signum, handled)
