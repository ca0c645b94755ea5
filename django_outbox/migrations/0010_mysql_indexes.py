"""MariaDB and MySQL: what stands in for the partial indexes and conditional unique
constraints, which they lack.

Django skips a unique constraint with a condition there, and creates an index with one
over the whole table (its check says so: models.W036, W037). In their place:

- Unique active dedup keys: a virtual column holding ``dedup_key`` while the job is queued
  or running, NULL otherwise, under a unique index (NULLs never collide), so a finished
  job frees its key as the partial index does on PostgreSQL and SQLite.
- Message idempotency keys: a plain unique index over (tenant, key); rows without a key
  hold NULL, which never collides.
- The claim, lease and failure indexes: led by the status their partial index kept, so
  that a claim reads only queued rows, in claim order. A claim of several queues reads a
  second index, in claim order across queues, holding the queue and the backend too: a
  locking read locks what it reads, so it must read no further than the rows it takes
  (``Dialect.claim_index``).

Other databases have what the models declare: nothing happens there.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

_JOB = "django_outbox_job"

FORWARD = [
    f"ALTER TABLE {_JOB} ADD COLUMN dedup_active VARCHAR(255) "
    "AS (CASE WHEN status IN ('queued', 'running') THEN dedup_key END) VIRTUAL",
    f"CREATE UNIQUE INDEX outbox_job_dedup_active ON {_JOB} (dedup_active)",
    "CREATE UNIQUE INDEX outbox_message_idempotency ON django_outbox_message "
    "(tenant, idempotency_key)",
    f"DROP INDEX outbox_job_claim ON {_JOB}",
    f"CREATE INDEX outbox_job_claim ON {_JOB} (status, queue, priority DESC, run_at, id)",
    f"CREATE INDEX outbox_job_claim_order ON {_JOB} "
    "(status, priority DESC, run_at, id, queue, backend)",
    f"DROP INDEX outbox_job_failed ON {_JOB}",
    f"CREATE INDEX outbox_job_failed ON {_JOB} (status, finished_at)",
    f"DROP INDEX outbox_job_lease ON {_JOB}",
    f"CREATE INDEX outbox_job_lease ON {_JOB} (status, lease_until)",
]

BACKWARD = [
    f"DROP INDEX outbox_job_lease ON {_JOB}",
    f"CREATE INDEX outbox_job_lease ON {_JOB} (lease_until)",
    f"DROP INDEX outbox_job_failed ON {_JOB}",
    f"CREATE INDEX outbox_job_failed ON {_JOB} (finished_at)",
    f"DROP INDEX outbox_job_claim_order ON {_JOB}",
    f"DROP INDEX outbox_job_claim ON {_JOB}",
    f"CREATE INDEX outbox_job_claim ON {_JOB} (queue, priority DESC, run_at, id)",
    "DROP INDEX outbox_message_idempotency ON django_outbox_message",
    f"DROP INDEX outbox_job_dedup_active ON {_JOB}",
    f"ALTER TABLE {_JOB} DROP COLUMN dedup_active",
]


def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.vendor != "mysql":
            return
        for sql in statements:
            # Django made the indexes it could: MariaDB has no index over an expression
            # (the claim's descending priority), MySQL 8.0.13+ has.
            if sql.startswith("DROP INDEX"):
                name, table = sql.split()[2], sql.split()[4]
                with connection.cursor() as cursor:
                    if name not in connection.introspection.get_constraints(cursor, table):
                        continue
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0009_job_token_db_default")]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), atomic=False, elidable=False)
    ]
