"""MariaDB and MySQL: the index of finished jobs holds their status too, so that the
dashboard's chart of the last hour counts them by status from the index alone.

Migration 0010 left ``outbox_job_finished`` over ``(finished_at)``, the whole table (no
partial index here): the chart's count by minute and status looked up each finished row
of the hour for its status. Over ``(finished_at, status)`` an active job's entry would move
at each claim; so the status is a virtual column that holds it for finished rows only,
``finished_status``, NULL (with ``finished_at``) until the job ends: a claim or a retry
rewrites no entry of this index, and a completion the one it rewrote already.

Other databases have the partial index the model declares: nothing happens there.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

_JOB = "django_outbox_job"

FORWARD = [
    f"ALTER TABLE {_JOB} ADD COLUMN finished_status VARCHAR(10) "
    "AS (CASE WHEN finished_at IS NOT NULL THEN status END) VIRTUAL",
    f"DROP INDEX outbox_job_finished ON {_JOB}",
    f"CREATE INDEX outbox_job_finished ON {_JOB} (finished_at, finished_status)",
]

BACKWARD = [
    f"DROP INDEX outbox_job_finished ON {_JOB}",
    f"CREATE INDEX outbox_job_finished ON {_JOB} (finished_at)",
    f"ALTER TABLE {_JOB} DROP COLUMN finished_status",
]


def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "mysql":
            return
        for sql in statements:
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0019_endpoint_url_and_message_uid_labels")]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), atomic=False, elidable=False)
    ]
