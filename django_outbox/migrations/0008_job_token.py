"""A random token for each job: result ids become "<pk>-<token in hex>" (see
django_outbox/lib/resultids.py), so the id of a job whose enqueue rolled back never names
the job that was given its primary key next.

Rows already stored get token 0: their result id stays the bare primary key, so ids handed
out before this migration keep working. New rows get a random token from the model's
default (or from the statement that writes them, for the few written in SQL). This
migration leaves the column without a database default; 0009 gives it one (0), so that
code older than this migration can still enqueue during a rolling upgrade.

On PostgreSQL the column lands at the end of the table (after trace_context), outside the
runs of columns a claim and a completion write, which stay neighbours (migration 0001,
tests/test_claim.py); in the WAL of an UPDATE it is part of the unchanged suffix. (SQLite
rebuilds the table for the new column and puts it first; it has no such concern.)
"""

from __future__ import annotations

from django.db import migrations, models

import django_outbox.lib.resultids


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0007_job_trace_context")]

    operations = [
        migrations.SeparateDatabaseAndState(
            # Existing rows: 0. Django drops the column's default after filling it in.
            database_operations=[
                migrations.AddField(
                    model_name="job",
                    name="token",
                    field=models.IntegerField(default=0, editable=False),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="job",
                    name="token",
                    field=models.IntegerField(
                        default=django_outbox.lib.resultids.new_token, editable=False
                    ),
                ),
            ],
        ),
    ]
