"""OS signals: SIGTERM or SIGINT drains the worker; a second SIGINT exits at once.

Installed only on the main thread, and the previous handlers come back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

logger = logging.getLogger("django_outbox.worker")

#: The exit status after a second SIGINT, as a shell reports a process killed by SIGINT.
ABORT_STATUS = 130


@contextlib.contextmanager
def graceful_signals(on_stop: Callable[[str], None]) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = {"interrupts": 0}

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:
            seen["interrupts"] += 1
            if seen["interrupts"] > 1:
                logger.warning(
                    "second SIGINT: exiting now; running jobs are left leased and run again "
                    "once their lease expires"
                )
                logging.shutdown()
                os._exit(ABORT_STATUS)
        on_stop(f"received {name}")

    previous: dict[int, Any] = {}
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        previous[stop_signal] = signal.signal(stop_signal, handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
