"""The ``run_after`` a job was enqueued with, so that a result read back says what was
enqueued (``run_at`` moves with each retry's backoff). Nullable: rows already stored read
back as enqueued to run at once, and adding it rewrites no table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0016_portal_message_tenant"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="run_after",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
