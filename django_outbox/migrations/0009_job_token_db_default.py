"""A database default of 0 for ``Job.token`` (migration 0008 left the column without one).

During a rolling upgrade, code older than 0008 still enqueues after the migration has run:
it does not know the column, and without a default every one of its inserts failed. With
0, its rows get a bare-number result id, as rows stored before 0008 have. django_outbox's
own writes always give a random token (the model's default, or the statement that writes
the row). On PostgreSQL this only sets the column's default; nothing is rewritten.
"""

from __future__ import annotations

from django.db import migrations, models

import django_outbox.lib.resultids


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0008_job_token")]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="token",
            field=models.IntegerField(
                db_default=0, default=django_outbox.lib.resultids.new_token, editable=False
            ),
        ),
    ]
