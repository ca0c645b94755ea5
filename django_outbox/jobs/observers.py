"""Whether a task signal would reach anyone.

The tasks framework connects its own log line to ``task_enqueued``, ``task_started`` and
``task_finished``; most sites keep its logger quiet. For a quick job, building the
TaskResult and sending the signal cost more than the job's own run (and a webhook fan-out
to a thousand endpoints would build a thousand), so they are skipped when the only receiver
is that log line and no handler would write the line out. Any other receiver, or a handler
that may write it, and the signal goes as always.

Django's default logging is the common case: the ``django`` logger is at INFO, but its
handlers are a console that writes only under ``DEBUG`` and the admins' mail, for errors
only; a line of every run would be built for nobody. A handler's filters are evaluated only
where they are Django's own ``RequireDebugTrue`` / ``RequireDebugFalse``: any other filter
may let the line through, so its handler counts as one that writes.
"""

from __future__ import annotations

import importlib
import logging
import weakref
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.log import RequireDebugFalse, RequireDebugTrue

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
    return target is not own or would_write(_logger, level)


def would_write(logger: logging.Logger, level: int) -> bool:
    """Whether a record at ``level`` from ``logger`` may reach a handler that writes it:
    as ``Logger.callHandlers`` walks the handlers, without building the record."""
    if logger.disabled or not logger.isEnabledFor(level):
        return False
    if logger.filters:  # the logger's own filters see the record first: they may pass it
        return True
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if level >= handler.level and _may_pass(handler):
                return True
        if not current.propagate:
            break
        current = current.parent
    if not found:  # Python's last resort: a stderr handler at WARNING
        resort = logging.lastResort
        return resort is not None and level >= resort.level
    return False


def _may_pass(handler: logging.Handler) -> bool:
    """Whether ``handler``'s filters may let a record through (Django's DEBUG filters are
    asked; any other filter may)."""
    for found in handler.filters:
        if type(found) is RequireDebugTrue and not _debug():
            return False
        if type(found) is RequireDebugFalse and _debug():
            return False
    return True


#: settings.DEBUG, read once: asked for every job, and the settings object is a lazy proxy.
_DEBUG: list[bool] = []


def _debug() -> bool:
    if not _DEBUG:
        _DEBUG.append(bool(settings.DEBUG))
    return _DEBUG[0]


@receiver(setting_changed)
def _forget_debug(*, setting: str, **kwargs: Any) -> None:
    if setting == "DEBUG":
        _DEBUG.clear()
