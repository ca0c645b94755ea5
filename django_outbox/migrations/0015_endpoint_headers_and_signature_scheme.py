"""An endpoint's own headers, and its signature scheme: Standard Webhooks' v1 (a shared
secret, every endpoint so far) or v1a (ed25519).

Both columns have a database default (v1, no headers): during a rolling upgrade, code older
than this migration still creates endpoints without them, as SQL of one's own may."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0014_message_ordering_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="endpoint",
            name="headers",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, output_field=models.JSONField()),
                default=dict,
            ),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="signature_scheme",
            field=models.CharField(
                choices=[
                    ("v1", "v1: HMAC-SHA256 with a shared whsec_ secret"),
                    ("v1a", "v1a: ed25519, the receiver holds the whpk_ public key"),
                ],
                db_default="v1",
                default="v1",
                max_length=3,
            ),
        ),
    ]
