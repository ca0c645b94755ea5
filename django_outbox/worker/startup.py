"""Before a worker starts: its database must answer.

A refused connection is waited for, backing off, so a worker started beside a database
that is still starting (or restarting) begins once it answers; under ``--burst`` (cron, CI)
the wait is bounded and ends with a non-zero exit. Settings the server refuses (a database
or user it does not have, a wrong password) end the start at once: waiting cannot fix them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django_outbox.db.reachability import unreachable, where

logger = logging.getLogger("django_outbox.worker")

#: Tries of a burst worker before it gives up: waits of 0.5, 1, 2, 4 and 8 s between them.
BURST_TRIES = 6
#: Longest wait between two tries.
LONGEST_WAIT = 10.0


class DatabaseUnusable(Exception):
    """The worker cannot start: ``str()`` says why and what to do."""

    def __init__(self, message: str, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


def wait_for_databases(aliases: Iterable[str], burst: bool) -> None:
    """Return once every database of ``aliases`` answers; raise DatabaseUnusable when one
    refuses its settings, or (``burst``) did not answer in BURST_TRIES tries."""
    for alias in dict.fromkeys(aliases):
        _wait_for(alias, burst)


def _wait_for(alias: str, burst: bool) -> None:
    tries = 0
    waited = 0.0
    while True:
        problem = unreachable(alias)
        if problem is None:
            if tries:
                logger.info("database %s answers now; starting", where(alias))
            return
        tries += 1
        if problem.permanent:
            raise DatabaseUnusable(
                f"the database {where(alias)} refuses the settings: {problem.error}. Waiting "
                f"will not change that: correct DATABASES[{alias!r}] (NAME, USER, PASSWORD) "
                "or create the database, then start the worker again.",
                permanent=True,
            )
        if burst and tries >= BURST_TRIES:
            raise DatabaseUnusable(
                f"the database {where(alias)} did not answer in {tries} tries over "
                f"{waited:.0f} s ({problem.error}); leaving (burst) without looking for jobs.",
                permanent=False,
            )
        pause = min(LONGEST_WAIT, 0.5 * 2 ** (tries - 1))
        logger.warning(
            "database %s does not answer (%s); trying again in %.1f s",
            where(alias),
            problem.error,
            pause,
        )
        time.sleep(pause)
        waited += pause
