"""The portal: an index for a tenant's messages, newest first (docs/portal.md).

Numbered 0016 beside the catalogue's 0015; it depends on 0014 until the two branches meet,
when it is re-pointed to 0015."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0015_endpoint_headers_and_signature_scheme"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="message",
            index=models.Index(fields=["tenant", "id"], name="outbox_message_tenant"),
        ),
    ]
