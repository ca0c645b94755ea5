"""A multi-row INSERT written out, for the batches a worker writes over and over.

``bulk_create()`` builds model instances and compiles its statement for every batch; for a
busy worker's attempt log that cost more CPU than PostgreSQL spent running the statement.
Values are adapted by each field's own ``get_db_prep_save``, as the ORM would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, router
from django.db.models import Model

from django_outbox.jobs.returning import column


def insert_rows(
    model: type[Model], names: Sequence[str], rows: Sequence[Sequence[Any]]
) -> list[int]:
    """Insert ``rows`` (values in the order of the field ``names``) in one statement;
    returns the new primary keys, in the order of ``rows``."""
    if not rows:
        return []
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in names]
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params: list[Any] = []
    for row in rows:
        params += [
            field.get_db_prep_save(value, connection)  # type: ignore[union-attr]
            for field, value in zip(fields, row, strict=True)
        ]
    assert model._meta.pk is not None
    pk = quote(column(model, model._meta.pk.name))
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} "
        f"({', '.join(quote(column(model, name)) for name in names)}) "
        f"VALUES {', '.join([placeholders] * len(rows))} RETURNING {pk}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        # Both databases return the rows of a multi-row VALUES in order (bulk_create relies
        # on it too).
        return [row[0] for row in cursor.fetchall()]
