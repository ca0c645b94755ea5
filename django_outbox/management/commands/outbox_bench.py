"""``python manage.py outbox_bench WORKLOAD``: measure django_outbox on this database.

Run it against a scratch database: it enqueues and deletes its own jobs, and its
workers also run any other due job in the queue it uses.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_outbox.bench.drain import drain
from django_outbox.management.commands.runworker import positive_int


class Command(BaseCommand):
    help = "Benchmark django_outbox on the configured database and print the figures."

    def add_arguments(self, parser: CommandParser) -> None:
        workloads = parser.add_subparsers(dest="workload", required=True)
        drain_parser = workloads.add_parser(
            "drain", help="Enqueue N no-op jobs, then time workers emptying the queue."
        )
        drain_parser.add_argument("--jobs", type=positive_int, default=20000)
        drain_parser.add_argument("--processes", type=positive_int, default=2)
        drain_parser.add_argument("--concurrency", type=positive_int, default=4)
        drain_parser.add_argument("--batch-size", type=positive_int, default=None)
        drain_parser.add_argument("--queue", default="default")

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("django_outbox").setLevel(logging.WARNING)
        figures = drain(
            jobs=options["jobs"],
            processes=options["processes"],
            concurrency=options["concurrency"],
            batch_size=options["batch_size"],
            queue=options["queue"],
        )
        width = max(len(name) for name, _ in figures.rows())
        self.stdout.write("outbox_bench drain")
        for name, value in figures.rows():
            self.stdout.write(f"  {name:<{width}}  {value}")
