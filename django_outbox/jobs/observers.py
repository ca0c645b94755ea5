"""Whether a task signal would reach anyone.

The tasks framework connects its own log line to ``task_enqueued``, ``task_started`` and
``task_finished``; most sites keep its logger quiet. For a quick job, building the
TaskResult and sending the signal cost more than the job's own run (and a webhook fan-out
to a thousand endpoints would build a thousand), so they are skipped when the only receiver
is that log line and its logger would drop the line. Any other receiver, or the logger enabled at
the line's level, and the signal goes as always.
"""

from __future__ import annotations

import importlib
import logging
import weakref
from typing import Any

from django_outbox.compat import LOGGER_NAME, task_enqueued, task_finished, task_started

_logger = logging.getLogger(LOGGER_NAME)
# The framework's package is named as its logger: django.tasks, or django_tasks.
_framework_signals = importlib.import_module(f"{LOGGER_NAME}.signals")
_OWN_LOG_LINE: dict[Any, Any] = {
    task_enqueued: getattr(_framework_signals, "log_task_enqueued", None),
    task_started: getattr(_framework_signals, "log_task_started", None),
    task_finished: getattr(_framework_signals, "log_task_finished", None),
}


def heard(signal: Any, level: int = logging.INFO) -> bool:
    """Whether sending ``signal`` would reach a receiver other than the framework's own log
    line, or that line at ``level``."""
    receivers = signal.receivers
    if not receivers:
        return False
    own = _OWN_LOG_LINE.get(signal)
    if own is None or len(receivers) != 1:
        return True
    target = receivers[0][1]
    if isinstance(target, weakref.ReferenceType):
        target = target()
    return target is not own or _logger.isEnabledFor(level)
