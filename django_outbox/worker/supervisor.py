"""``runworker --processes N``: a parent that keeps N worker processes alive.

Children are forked after the parent closes its database connections; the parent runs
no threads and no queries. A child that dies is restarted (with a pause if it keeps
dying); SIGTERM or SIGINT is passed on to the children as SIGTERM, and the parent waits for
them to drain. Under ``--burst`` a child that exits 0 is done and is not replaced.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

from django.db import connections

from django_outbox.lib import text

logger = logging.getLogger("django_outbox.worker")

#: A child that dies sooner than this after starting counts as crashing.
CRASH_WINDOW_SECONDS = 5.0
#: A child's exit status asking to be replaced: a thread of it was stuck in a timed-out
#: job, and it drained and exited so that a fresh process takes its place.
REPLACE_STATUS = 3
#: A child's exit status saying it could not claim jobs (the database refused the claim,
#: or, under --burst, stayed out of reach): under --burst it is not started again.
CANNOT_CLAIM_STATUS = 4


class Supervisor:
    def __init__(
        self,
        processes: int,
        child_main: Callable[..., object],
        child_args: tuple[Any, ...] = (),
        burst: bool = False,
    ) -> None:
        self.processes = processes
        self.child_main = child_main
        self.child_args = child_args
        self.burst = burst
        self.restarts = 0
        self._context = multiprocessing.get_context("fork")
        self._children: dict[int, tuple[BaseProcess, float]] = {}
        self._stopping = False
        self._interrupts = 0

    def run(self) -> int:
        previous = {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for slot in range(self.processes):
                self._start(slot)
            return self._watch()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _start(self, slot: int) -> None:
        connections.close_all()  # never share a connection with a forked child
        process = self._context.Process(
            target=self.child_main, args=(*self.child_args, os.getpid()), daemon=False
        )
        process.start()
        self._children[slot] = (process, time.monotonic())
        logger.info("supervisor: started worker process %s (slot %d)", process.pid, slot)

    def _watch(self) -> int:
        status = 0
        crashes = 0
        while self._children:
            time.sleep(0.2)
            for slot, (process, started) in list(self._children.items()):
                if process.is_alive():
                    continue
                process.join()
                code = process.exitcode
                del self._children[slot]
                if self._stopping or (self.burst and code in (0, CANNOT_CLAIM_STATUS)):
                    if code and code != REPLACE_STATUS:  # it did not drain cleanly
                        status = status or (code if code > 0 else 1)
                    continue
                if code == REPLACE_STATUS:  # drained on purpose: not a crash
                    pause = 0.0
                    logger.warning(
                        "supervisor: worker process %s drained after a job's thread got "
                        "stuck past its timeout; starting a fresh one",
                        process.pid,
                    )
                else:
                    crashed = time.monotonic() - started < CRASH_WINDOW_SECONDS
                    crashes = crashes + 1 if crashed else 0
                    pause = min(30.0, 0.5 * 2 ** min(crashes, 6)) if crashes else 0.0
                    logger.warning(
                        "supervisor: worker process %s %s; starting another%s",
                        process.pid,
                        exit_description(code),
                        f" in {text.duration(pause)}" if pause else "",
                    )
                self.restarts += 1
                if pause:
                    time.sleep(pause)
                if not self._stopping:
                    self._start(slot)
        return status

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT:
            self._interrupts += 1
        if self._interrupts > 1:
            logger.warning("supervisor: second SIGINT; killing the worker processes")
            self._send(signal.SIGKILL)
            return
        if not self._stopping:
            logger.info(
                "supervisor: received %s; stopping %d worker processes",
                signal.Signals(signum).name,
                len(self._children),
            )
        self._stopping = True
        self._send(signal.SIGTERM)

    def _send(self, signum: int) -> None:
        for process, _started in self._children.values():
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signum)


def exit_description(code: int | None) -> str:
    """How a child process ended: "exited with status 1", "was killed by SIGKILL"."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"
