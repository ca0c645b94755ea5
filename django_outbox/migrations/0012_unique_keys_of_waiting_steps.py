"""A unique key is held by a waiting workflow step too: the active statuses of the unique
index on dedup keys gain ``waiting``.

PostgreSQL and SQLite rebuild the partial unique index; MariaDB and MySQL, which have none
(migration 0010), recompute the virtual column under their unique index instead.
"""

from typing import Any

from django.db import migrations, models

_JOB = "django_outbox_job"


def _active_column(statuses: str) -> list[str]:
    return [
        f"DROP INDEX outbox_job_dedup_active ON {_JOB}",
        f"ALTER TABLE {_JOB} MODIFY COLUMN dedup_active VARCHAR(255) "
        f"AS (CASE WHEN status IN ({statuses}) THEN dedup_key END) VIRTUAL",
        f"CREATE UNIQUE INDEX outbox_job_dedup_active ON {_JOB} (dedup_active)",
    ]


FORWARD = _active_column("'waiting', 'queued', 'running'")
BACKWARD = _active_column("'queued', 'running'")


def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "mysql":
            return
        for sql in statements:
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0011_workflows")]

    operations = [
        migrations.RemoveConstraint(model_name="job", name="outbox_job_dedup_active"),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("dedup_key__isnull", False), ("status__in", ["waiting", "queued", "running"])
                ),
                fields=("dedup_key",),
                name="outbox_job_dedup_active",
            ),
        ),
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), atomic=False, elidable=False),
    ]
