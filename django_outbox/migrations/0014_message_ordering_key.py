"""Ordered webhooks: a message's ordering key (``send(ordering_key=...)``)."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0013_limit_keys_and_paused_queues"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="ordering_key",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
    ]
