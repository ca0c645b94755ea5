"""The worker's lines on the terminal, in a project that configured no logging for them.

Django's default logging shows only the ``django`` logger's lines, and only with DEBUG on;
django_outbox's loggers reach no handler, so a new project's ``runworker`` said nothing at
start, nothing at stop, and its warnings came out bare. As ``runserver`` and Celery's worker
do, ``runworker`` then prints its own lines: its start (what it runs, and with which
settings), its warnings and its stop summary. A project whose LOGGING gives django_outbox
(or the root logger) a handler decides for itself: nothing is added then.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "django_outbox"
FORMAT = "%(asctime)s %(levelname)s %(message)s"


def level_for(verbosity: int) -> int:
    """``-v 0``: warnings and errors only; ``-v 1`` (the default): also the start and stop
    lines; ``-v 2`` and more: debug lines too."""
    if verbosity <= 0:
        return logging.WARNING
    return logging.INFO if verbosity == 1 else logging.DEBUG


def attach(verbosity: int, stream: object = None) -> logging.Handler | None:
    """Print django_outbox's lines to ``stream`` (stderr) unless the project's logging
    already sends them somewhere; returns the handler added, if any."""
    logger = logging.getLogger(LOGGER)
    if logger.hasHandlers():
        return None
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(logging.Formatter(FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(level_for(verbosity))
    return handler
