"""Concurrency and sequence keys (``Job.limit_key``, ``LimitKey``, the ``held`` status)
and paused queues (``QueueState``).

A held job can still run, so it holds its unique key: the active statuses of the unique
index on dedup keys gain ``held``. PostgreSQL and SQLite rebuild the partial unique index;
MariaDB and MySQL, which have none (migration 0010), recompute the virtual column under
their unique index instead. There the limit key's index covers the whole table, as an
index with a condition does.
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


FORWARD = _active_column("'waiting', 'held', 'queued', 'running'")
BACKWARD = _active_column("'waiting', 'queued', 'running'")


def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "mysql":
            return
        for sql in statements:
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0012_unique_keys_of_waiting_steps")]

    operations = [
        migrations.CreateModel(
            name="LimitKey",
            fields=[
                ("key", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("limit", models.PositiveIntegerField(default=1)),
                ("holds_on_failure", models.BooleanField(default=False)),
                ("held_by", models.BigIntegerField(blank=True, null=True)),
                ("updated_at", models.DateTimeField()),
            ],
            options={"verbose_name": "limit key", "db_table": "django_outbox_limit_key"},
        ),
        migrations.CreateModel(
            name="QueueState",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={"verbose_name": "queue", "db_table": "django_outbox_queue_state"},
        ),
        migrations.AddField(
            model_name="job",
            name="limit_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("waiting", "Waiting"),
                    ("held", "Held"),
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=10,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("limit_key__isnull", False)),
                fields=["limit_key", "status", "id"],
                name="outbox_job_limit_key",
            ),
        ),
        migrations.RemoveConstraint(model_name="job", name="outbox_job_dedup_active"),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("dedup_key__isnull", False),
                    ("status__in", ["waiting", "held", "queued", "running"]),
                ),
                fields=("dedup_key",),
                name="outbox_job_dedup_active",
            ),
        ),
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), atomic=False, elidable=False),
    ]
