"""``python manage.py outbox_health``: exit 0 when the outbox is healthy, 1 when not, with a
one-line reason; for liveness and readiness probes (see docs/health.md)."""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_outbox import health
from django_outbox.migrated import require_migrated


def _queues(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


class Command(BaseCommand):
    help = (
        "Check the outbox: a live worker for every queue with due jobs (and every queue "
        "named), the oldest due job's wait, the recent failure rate. Prints one line; "
        "exits 0 when healthy, 1 when not."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            type=_queues,
            help="Comma-separated queues that must have a live worker even with nothing due "
            "(default: OUTBOX['HEALTH']['QUEUES']).",
        )
        parser.add_argument(
            "--max-due-age",
            type=float,
            metavar="SECONDS",
            help="Longest the oldest due job may wait (default: MAX_DUE_AGE_SECONDS).",
        )
        parser.add_argument(
            "--max-failure-rate",
            type=float,
            metavar="RATE",
            help="Highest failure rate of recent jobs, 0 to 1 (default: MAX_FAILURE_RATE).",
        )
        parser.add_argument(
            "--window",
            type=float,
            metavar="SECONDS",
            help="How far back the failure rate looks (default: WINDOW_SECONDS).",
        )
        parser.add_argument(
            "--this-host",
            action="store_true",
            help="Only workers on this host count: a liveness probe of this machine's workers.",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print every figure as JSON, not one line."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated("python manage.py outbox_health")
        for name in ("max_due_age", "window"):
            value = options[name]
            if value is not None and not 0 < value < float("inf"):
                flag = "--" + name.replace("_", "-")
                raise CommandError(f"{flag} must be a number of seconds above 0, not {value}.")
        rate = options["max_failure_rate"]
        if rate is not None and not 0 <= rate <= 1:
            raise CommandError(f"--max-failure-rate must be from 0 to 1, not {rate}.")
        try:
            found = health.check(
                options["queues"],
                max_due_age=options["max_due_age"],
                max_failure_rate=rate,
                window=options["window"],
                host=socket.gethostname() if options["this_host"] else None,
            )
        except DatabaseError as exc:
            # No database, no outbox: that is the answer, not a traceback.
            self.stdout.write(f"unhealthy: the database cannot be read ({type(exc).__name__})")
            sys.exit(1)
        if options["json"]:
            self.stdout.write(json.dumps(found.as_dict(), indent=2))
        else:
            self.stdout.write(found.reason)
        if not found.ok:
            sys.exit(1)
