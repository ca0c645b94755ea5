"""``python manage.py runworker``: thin; it parses arguments and starts the worker."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import NotSupportedError, router

from django_outbox.backend import OutboxBackend
from django_outbox.compat import InvalidTaskBackend, task_backends
from django_outbox.db import dialect
from django_outbox.db.routing import serving
from django_outbox.migrated import require_migrated
from django_outbox.models import Attempt, Job
from django_outbox.worker import console, reload
from django_outbox.worker.loop import MAX_BATCH_SIZE
from django_outbox.worker.process import WorkerOptions, run
from django_outbox.worker.startup import DatabaseUnusable, wait_for_databases
from django_outbox.worker.supervisor import CANNOT_CLAIM_STATUS


def whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        wanted = "0 or more" if minimum == 0 else f"at least {minimum}"
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {value}")
    return value


def non_negative_int(text: str) -> int:
    return whole_number(text, 0)


def positive_int(text: str) -> int:
    return whole_number(text, 1)


def batch_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH_SIZE}, got {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def queue_list(text: str) -> list[str]:
    queues = [name.strip() for name in text.split(",") if name.strip()]
    if not queues:
        raise argparse.ArgumentTypeError("name at least one queue, e.g. --queues default,emails")
    return queues


class Command(BaseCommand):
    help = "Run django_outbox workers: claim due jobs, run them, record what happened."
    # The system checks ask the database (its server's version, its features): they run
    # once it answers, in _handle, not before a worker started beside a database that is
    # still starting could wait for it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            type=queue_list,
            help="Comma-separated queues (default: all of the backend's).",
        )
        parser.add_argument(
            "--backend", default="default", help="The TASKS alias (default: default)."
        )
        parser.add_argument(
            "--concurrency", type=positive_int, default=4, help="Threads per process (default 4)."
        )
        parser.add_argument(
            "--processes",
            type=positive_int,
            default=1,
            help="Worker processes; more than 1 starts a supervisor that restarts any that die.",
        )
        parser.add_argument(
            "--batch-size",
            type=batch_size,
            default=None,
            help="Most jobs claimed at once and held (default: 4 times --concurrency).",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit 0 once nothing is due (tests, demos, cron)."
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=seconds,
            default=30.0,
            help="Seconds running jobs get to finish after SIGTERM or SIGINT (default 30).",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Start again when the code changes (development); running jobs finish first.",
        )
        parser.add_argument("--skip-checks", action="store_true", help="Skip system checks.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["reload"]:
            if options["processes"] > 1:
                raise CommandError(
                    "runworker: --reload runs one worker process and starts it again when the "
                    "code changes; it does not go with --processes. Leave out one of them."
                )
            if not reload.is_child():
                # This process only restarts the worker: it opens no database connection.
                console.attach(options["verbosity"])
                status = reload.run_reloader()
                if status:
                    raise SystemExit(status)
                return
        # Everything below reads and writes the database of the alias served.
        with serving(options["backend"]):
            self._handle(**options)

    def _handle(self, **options: Any) -> None:
        console.attach(options["verbosity"])
        try:
            wait_for_databases(
                [router.db_for_write(model) for model in (Job, Attempt)], options["burst"]
            )
        except DatabaseUnusable as exc:
            if exc.permanent:
                raise CommandError(f"runworker: {exc}") from None
            self.stderr.write(f"runworker --burst: {exc}")
            raise SystemExit(CANNOT_CLAIM_STATUS) from None
        if not options["skip_checks"]:
            self.check()
        require_migrated("python manage.py runworker")
        try:
            dialect(router.db_for_write(Job))
        except NotSupportedError as exc:
            raise CommandError(str(exc)) from exc
        try:
            backend = task_backends[options["backend"]]
        except InvalidTaskBackend as exc:
            raise CommandError(str(exc)) from exc
        if not isinstance(backend, OutboxBackend):
            raise CommandError(
                f"TASKS[{options['backend']!r}] uses {type(backend).__name__}; runworker runs "
                "django_outbox.backend.OutboxBackend."
            )
        known = sorted(backend.queues)
        queues = options["queues"] or known
        if not queues:
            raise CommandError(
                f"TASKS[{options['backend']!r}] lists no QUEUES; name them with --queues."
            )
        unknown = [name for name in queues if known and name not in known]
        if unknown:
            raise CommandError(
                f"Unknown queue(s) {', '.join(map(repr, unknown))}: "
                f"TASKS[{options['backend']!r}]['QUEUES'] lists {', '.join(map(repr, known))}. "
                "Add them there, or leave out --queues to serve all of them."
            )
        worker_options = WorkerOptions(
            queues=queues,
            concurrency=options["concurrency"],
            batch_size=options["batch_size"],
            burst=options["burst"],
            shutdown_timeout=options["shutdown_timeout"],
            backend=options["backend"],
        )
        status = run(worker_options, processes=options["processes"], watch=options["reload"])
        if status:
            raise SystemExit(status)
