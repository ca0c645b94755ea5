"""``python manage.py outbox_partition``: rewrite the job table as a table partitioned by
status and by day of finishing (PostgreSQL, ``OUTBOX["RETENTION"]["PARTITIONS"]``), so
that retention drops a past day's partition instead of deleting its rows; ``--undo`` makes
it one table again. Both run in one transaction, with the workers stopped."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections, router

from django_outbox import conf
from django_outbox.db import partitions
from django_outbox.lib import text
from django_outbox.migrated import require_migrated
from django_outbox.models import Job


class Command(BaseCommand):
    help = (
        "Rewrite the job table as a table partitioned by status and by day of finishing "
        "(PostgreSQL, with OUTBOX['RETENTION']['PARTITIONS'] = True), so that retention drops "
        "a past day instead of deleting its rows; --undo makes it one table again. Stop the "
        "workers first: it holds the table for the time it takes to copy its rows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--undo", action="store_true", help="Make the partitioned job table one table again."
        )
        parser.add_argument(
            "--database",
            help="The database of the job table (default: where django_outbox writes jobs).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated("python manage.py outbox_partition")
        alias = options["database"] or router.db_for_write(Job)
        if alias not in connections:
            raise CommandError(f"No database {alias!r} in DATABASES.")
        connection = connections[alias]
        table = Job._meta.db_table
        if not partitions.supported(alias):
            raise CommandError(
                f"The job table can be partitioned on PostgreSQL only; the database {alias!r} "
                "is not PostgreSQL."
            )
        partitioned = partitions.is_partitioned(connection, table)
        if options["undo"]:
            if not partitioned:
                self.stdout.write(f"{table} is one table already: nothing to undo.")
                return
            partitions.unpartition(connection, table)
            self.stdout.write(
                f"{table} is one table again, with its {self._rows(connection, table)}. "
                "Set OUTBOX['RETENTION']['PARTITIONS'] = False (or leave it out)."
            )
            return
        retention = conf.get().RETENTION
        if retention is None or not retention.PARTITIONS:
            raise CommandError(
                "Set OUTBOX['RETENTION']['PARTITIONS'] = True first: the workers then make "
                "the partitions of the days ahead, and prune by dropping past days."
            )
        if partitioned:
            self.stdout.write(f"{table} is partitioned already. {self._days(connection, table)}")
            return
        try:
            partitions.partition(connection, table, days_behind=retention.age.days + 1)
        except partitions.NotConvertible as exc:
            raise CommandError(f"{table} was left as it was: {exc}") from None
        except DatabaseError as exc:
            raise CommandError(f"{table} was left as it was: {exc}") from None
        self.stdout.write(
            f"{table} is partitioned, with its {self._rows(connection, table)}. "
            f"{self._days(connection, table)}"
        )

    def _rows(self, connection: Any, table: str) -> str:
        return text.count(Job.objects.using(connection.alias).count(), "job", "jobs")

    def _days(self, connection: Any, table: str) -> str:
        days = partitions.days(connection, table)
        if not days:
            return "It has no day partitions yet: the next prune makes them."
        first, last = days[0].start.date(), days[-1].start.date()
        return (
            f"Finished jobs go to a partition a day: {text.count(len(days), 'day', 'days')}, "
            f"{first} to {last}, and a default one for other days."
        )
