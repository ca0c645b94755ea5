"""Leave room on each page of the job table for the row's later versions (PostgreSQL).

A job row is written three times: enqueued, claimed, finished. With pages filled to the
brim (PostgreSQL's default fillfactor, 100) each new version goes to another page, and the
WAL holds it whole, plus a lock record. With room left, it stays on its page: the WAL then
holds only the bytes that changed, and one page is dirtied instead of two.

A claim writes new versions of every row of a page in one transaction, so the room must
take them all: the old versions cannot be pruned until it commits. A claimed version is
about 1.3 times the enqueued one (worker id and worker list), so pages start at most 40 %
full. At 60 %, four claimed rows in ten still moved; 40 % cut WAL per job in
``outbox_bench drain`` from 1,095 to 999 bytes (from 1,360 at 100 %). Pages hold fewer
rows at first; the room is what the later versions fill, and pruning frees it again.
Other databases have no such setting: nothing happens there.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

FILLFACTOR = 40


def set_fillfactor(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name("django_outbox_job")
        schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def reset_fillfactor(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name("django_outbox_job")
        schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0005_rate_limits")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor, elidable=False)]
