"""The jobs the benchmarks run: they do nothing, so what is measured is the queue."""

from __future__ import annotations

from django.tasks import task


@task()
def noop() -> None:
    return None
