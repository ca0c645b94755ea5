"""The structure docs/architecture.md describes (the import contracts are import-linter's,
in ``make lint``)."""

from __future__ import annotations

import pathlib
import re

import pytest

import django_outbox

ROOT = pathlib.Path(django_outbox.__file__).parent

#: Modules that still ask which database they run on, to be moved behind the seam
#: (``django_outbox.db``, issue #20). The list only shrinks: a module that stops asking
#: must leave it, and no other module may start.
NOT_YET_BEHIND_THE_SEAM = {
    "admin/lists.py",
    "jobs/claim.py",
    "jobs/returning.py",
    "ratelimits/database.py",
    "worker/loop.py",  # names the vendor on the start line
}


def _product_modules() -> list[pathlib.Path]:
    skipped = {"db", "migrations"}
    return [path for path in ROOT.rglob("*.py") if not skipped & set(path.relative_to(ROOT).parts)]


def test_only_the_database_seam_asks_which_database_it_runs_on():
    asking = {
        str(path.relative_to(ROOT))
        for path in _product_modules()
        if re.search(r"\.vendor\b", path.read_text())
    }
    assert asking - NOT_YET_BEHIND_THE_SEAM == set(), "ask django_outbox.db.dialect() instead"
    assert NOT_YET_BEHIND_THE_SEAM - asking == set(), "moved behind the seam: take it off the list"


def test_no_job_row_is_written_outside_the_engines_enqueue_path():
    """Every job row goes through django_outbox/jobs/enqueue.py: no other product module
    inserts into the job table, creates Job rows or bulk-creates them."""
    writes = re.compile(
        r"Job\.objects(\.using\([^)]*\))?\.(create|bulk_create|get_or_create)\b"
        r"|INSERT INTO \{(job_table|quote\(Job\._meta\.db_table\))\}"
        r"|\bJob\(\s*(backend|queue|task_path)="
    )
    offenders = [
        str(path.relative_to(ROOT))
        for path in _product_modules()
        if path.name != "enqueue.py" and writes.search(path.read_text())
    ]
    assert offenders == []


def test_a_database_without_a_dialect_is_refused_by_name(settings):
    from django.db import NotSupportedError, connections

    from django_outbox.db import dialect

    connection = connections["default"]
    vendor = connection.vendor
    try:
        connection.vendor = "oracle"
        with pytest.raises(NotSupportedError, match="the database 'default' is oracle"):
            dialect("default")
    finally:
        connection.vendor = vendor
    assert dialect("default").vendor == vendor
