"""The partial index the dashboard counts waiting steps and held jobs per queue by.

MariaDB and MySQL have no partial index: Django would make one over every row there, which
every insert and every change of status would write. Their claim index (``status``,
``queue``, …, migration 0010) serves the count instead, so nothing is made there.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

INDEX = models.Index(
    condition=models.Q(("status__in", ["waiting", "held"])),
    fields=["queue", "status"],
    name="outbox_job_pending",
)


def _add(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "mysql":
        schema_editor.add_index(apps.get_model("django_outbox", "Job"), INDEX)


def _remove(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "mysql":
        schema_editor.remove_index(apps.get_model("django_outbox", "Job"), INDEX)


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0021_delivery_and_step_without_own_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="job", index=INDEX)],
            database_operations=[migrations.RunPython(_add, _remove, elidable=False)],
        )
    ]
