"""A task of TASKS["elsewhere"] (tests/settings.py), whose jobs live in a database of their
own: a module of its own, as only the test run has that alias (worker subprocesses have it
when their test asks)."""

from __future__ import annotations

from django_outbox.compat import task


@task(backend="elsewhere")
def noop() -> None:
    return None
