"""A delivery's message and a workflow step's workflow without an index of their own:
the unique ``outbox_delivery_once`` over ``(message, endpoint)`` and
``outbox_workflow_step_position`` over ``(workflow, position)`` serve every lookup by
message or by workflow, and a send or a workflow's write updates one index fewer a row.

Of the delivery's, only the index goes. Django's own ``AlterField`` would also drop and add the foreign key
again, which on PostgreSQL checks every delivery under a lock; the key is untouched here.
MariaDB and MySQL never had the index (InnoDB's foreign key uses the unique one).
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

_TABLE = "django_outbox_delivery"


def _index_name(schema_editor: Any) -> str:
    return str(schema_editor._create_index_name(_TABLE, ["message_id"]))


def _drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "mysql":
        return
    schema_editor.execute(
        f"DROP INDEX IF EXISTS {schema_editor.quote_name(_index_name(schema_editor))}"
    )


def _create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "mysql":
        return
    name = schema_editor.quote_name(_index_name(schema_editor))
    schema_editor.execute(f"CREATE INDEX {name} ON {schema_editor.quote_name(_TABLE)} (message_id)")


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0020_mysql_finished_status")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="delivery",
                    name="message",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="django_outbox.message",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_drop, _create, elidable=False)],
        ),
        # No foreign key in the database here: Django drops the index and nothing else.
        migrations.AlterField(
            model_name="workflowstep",
            name="workflow",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="steps",
                to="django_outbox.workflow",
            ),
        ),
    ]
