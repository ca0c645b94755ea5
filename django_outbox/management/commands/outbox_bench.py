"""``python manage.py outbox_bench WORKLOAD``: the benchmarks, when they are installed.

They are a distribution of their own, ``django-outbox-bench`` (the ``outbox_bench``
package), so that this one carries no benchmark or peer code. This module is the one place
the product names them (an import-linter contract holds it): it runs their command, or,
without them, says how to install them.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

#: What to say when the benchmarks are not installed.
NOT_INSTALLED = (
    "outbox_bench needs the benchmarks, which are not installed: "
    "pip install 'django-outbox-tasks[bench]' (from a checkout: pip install -e ./bench)"
)

try:
    from outbox_bench.command import Command
except ImportError as exc:
    if exc.name not in ("outbox_bench", "outbox_bench.command"):
        raise  # installed, but something it needs is not: let that say so

    class Command(BaseCommand):  # type: ignore[no-redef]
        help = "Benchmark django_outbox (needs the django-outbox-bench distribution)."

        def add_arguments(self, parser: CommandParser) -> None:
            # The workloads and their options are the benchmarks' to parse: whatever they
            # are, say what is missing.
            parser.add_argument("workload", nargs=argparse.REMAINDER)

        def handle(self, *args: Any, **options: Any) -> None:
            raise CommandError(NOT_INSTALLED)


__all__ = ["Command"]
