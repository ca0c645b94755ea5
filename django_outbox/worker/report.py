"""What a worker says in its log when it starts and when it stops."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import connections

from django_outbox.db import dialect
from django_outbox.lib import text
from django_outbox.wake import choice_reason
from django_outbox.worker.stats import WorkerStats

logger = logging.getLogger("django_outbox.worker")


def started(
    worker_id: str,
    *,
    backend: str,
    queues: list[str],
    concurrency: int,
    batches: str,
    alias: str,
    waker: str,
) -> None:
    logger.info(
        "worker %s started: backend %s, queues %s, %d threads, batches of %s, "
        "database %s, wake-ups: %s (%s)",
        worker_id,
        backend,
        ",".join(queues),
        concurrency,
        batches,
        describe_database(alias),
        waker,
        choice_reason(alias),
    )
    logger.info(
        "worker %s settings: %s; a change to them takes effect when the worker restarts",
        worker_id,
        describe_settings(),
    )


def left_behind(
    worker_id: str, unwritten: int, unreleased: int, running: int, shutdown_timeout: float
) -> None:
    """The warnings of a worker that stops with work it could not finish or write."""
    if unwritten or unreleased:
        undone = [
            f"write {text.count(unwritten, 'result')}" if unwritten else "",
            f"put back {text.count(unreleased, 'job')}" if unreleased else "",
        ]
        logger.warning(
            "worker %s: could not %s before stopping (database unreachable); those jobs "
            "run again once their lease expires",
            worker_id,
            " or ".join(filter(None, undone)),
        )
    if running:
        logger.warning(
            "worker %s: %s still running after the %s shutdown timeout; leaving them "
            "leased, to be run again once their lease expires",
            worker_id,
            text.count(running, "job"),
            text.duration(shutdown_timeout),
        )


def stopped(worker_id: str, stats: WorkerStats) -> None:
    per_run = ""
    if stats.finished:
        # Two decimals always, so that summaries side by side read alike ("39.00").
        per_run = f" ({stats.statements / stats.finished:,.2f} per run)"
    logger.info(
        "worker %s stopped: %s finished (%s succeeded, %s will retry, %s failed)"
        " in %s; %s statements%s",
        worker_id,
        text.count(stats.finished, "run"),
        text.number(stats.succeeded),
        text.number(stats.retried),
        text.number(stats.failed),
        text.duration(time.monotonic() - stats.started),
        text.number(stats.statements),
        per_run,
    )


def describe_database(alias: str) -> str:
    """``alias`` (vendor NAME), e.g. ``default (postgresql test)``."""
    name = connections[alias].settings_dict.get("NAME")
    return f"{alias} ({dialect(alias).vendor} {name})"


def describe_settings() -> str:
    """The project's OUTBOX setting as written (the rest is at its defaults), with what
    looks secret (a TOKEN, a KEY, a PASSWORD …) masked as Django's error pages mask it."""
    from django.views.debug import SafeExceptionReporterFilter

    written = getattr(settings, "OUTBOX", None)
    if not written:
        return "OUTBOX is not set (every setting at its default)"
    shown = SafeExceptionReporterFilter().cleanse_setting("OUTBOX", written)
    return f"OUTBOX = {shown!r} (the rest at its defaults)"
