"""``python manage.py outbox_prune --older-than 7d``: delete finished jobs and old webhook
messages in chunks, with a progress line."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_outbox import retention
from django_outbox.migrated import require_migrated


class Command(BaseCommand):
    help = (
        "Delete jobs finished longer ago than --older-than, and webhook messages created "
        "longer ago whose deliveries are all done (with their deliveries and attempts), "
        f"in chunks of at most {retention.CHUNK:,} rows per statement."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            required=True,
            help="An age: a number and s, m, h, d or w (e.g. 12h, 7d, 2w).",
        )
        parser.add_argument(
            "--status",
            default=",".join(retention.FINISHED_NAMES),
            help="Comma-separated job statuses to prune (default: succeeded,failed,cancelled).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would go; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated("python manage.py outbox_prune")
        try:
            older_than = retention.parse_age(options["older_than"])
            statuses = retention.parse_statuses(options["status"].split(","))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        # A live progress line only while rows are deleted: a dry run deletes none.
        live = not options["dry_run"] and (
            self.stdout.isatty() if hasattr(self.stdout, "isatty") else sys.stdout.isatty()
        )

        def progress(pruned: retention.Pruned) -> None:
            if live:
                self.stdout.write(f"\rdeleted so far: {pruned}\x1b[K", ending="")
                self.stdout.flush()

        pruned = retention.prune(older_than, statuses, options["dry_run"], progress)
        if live:
            self.stdout.write("")
        verb = "would delete" if options["dry_run"] else "deleted"
        self.stdout.write(
            f"outbox_prune {verb}: {pruned} (older than {options['older_than']}, "
            f"jobs {', '.join(statuses)})."
        )
