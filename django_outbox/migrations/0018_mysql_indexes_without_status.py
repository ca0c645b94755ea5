"""MariaDB and MySQL: the indexes of failed jobs and of limit keys, rewritten by no status
change of a job they do not hold.

Migration 0010 stood in for the partial index of failed jobs with one over
``(status, finished_at)``, and 0013 for that of keyed jobs with one over
``(limit_key, status, id)``, each over the whole table: every job's entry in both moved at
each change of its status, so a claim and a completion rewrote them whether or not the job
failed or had a key. In their place, virtual columns that hold a value only for the rows
the partial index holds, NULL otherwise:

- ``failed_at``: ``finished_at`` of a failed job, under ``outbox_job_failed``;
- ``limit_status``: the status of a job with a limit key, in ``outbox_job_limit_key``
  ``(limit_key, limit_status, id)``.

A job that does not fail and has no key keeps its NULL entries from insert to deletion.
Queries name the columns (``Dialect.failed_finished_column``, ``keyed_status_column``).

Other databases have the partial indexes the model declares: nothing happens there.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

_JOB = "django_outbox_job"

FORWARD = [
    f"ALTER TABLE {_JOB} ADD COLUMN failed_at DATETIME(6) "
    "AS (CASE WHEN status = 'failed' THEN finished_at END) VIRTUAL",
    f"ALTER TABLE {_JOB} ADD COLUMN limit_status VARCHAR(10) "
    "AS (CASE WHEN limit_key IS NOT NULL THEN status END) VIRTUAL",
    f"DROP INDEX outbox_job_failed ON {_JOB}",
    f"CREATE INDEX outbox_job_failed ON {_JOB} (failed_at)",
    f"DROP INDEX outbox_job_limit_key ON {_JOB}",
    f"CREATE INDEX outbox_job_limit_key ON {_JOB} (limit_key, limit_status, id)",
]

BACKWARD = [
    f"DROP INDEX outbox_job_limit_key ON {_JOB}",
    f"CREATE INDEX outbox_job_limit_key ON {_JOB} (limit_key, status, id)",
    f"DROP INDEX outbox_job_failed ON {_JOB}",
    f"CREATE INDEX outbox_job_failed ON {_JOB} (status, finished_at)",
    f"ALTER TABLE {_JOB} DROP COLUMN limit_status",
    f"ALTER TABLE {_JOB} DROP COLUMN failed_at",
]


def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "mysql":
            return
        for sql in statements:
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0017_job_run_after")]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), atomic=False, elidable=False)
    ]
