"""``CASE id WHEN … THEN … END``: one UPDATE writing a different value to each row.

Written as raw SQL with adapted parameters: building the same CASE from ORM expressions
costs more Python than the statement costs the database, and batched writes (job outcomes,
webhook attempts) run it for every batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import CharField, DateTimeField, IntegerField, JSONField
from django.db.models.expressions import RawSQL

#: PostgreSQL types its parameters: a CASE of NULLs alone would be text without a cast.
_POSTGRES_CAST = {"datetime": "timestamptz", "json": "jsonb", "int": "integer", "text": "text"}

_OUTPUT = {
    "datetime": DateTimeField,
    "json": JSONField,
    "int": IntegerField,
    "text": CharField,
}


def per_row(
    using: str, pairs: Sequence[tuple[int, Any]], kind: str, default: str | None = None
) -> RawSQL:
    """The value of each row by primary key; ``kind`` is datetime, json, int or text.

    ``default`` is SQL for rows not listed (a column name, or NULL when omitted).
    """
    connection = connections[using]
    ops = connection.ops
    adapt: Any = {
        "datetime": ops.adapt_datetimefield_value,
        "json": lambda value: ops.adapt_json_value(value, None),
        "int": int,
        "text": str,
    }[kind]
    then = f"%s::{_POSTGRES_CAST[kind]}" if connection.vendor == "postgresql" else "%s"
    whens = " ".join([f"WHEN %s THEN {then}"] * len(pairs))
    params = [param for key, value in pairs for param in (key, adapt(value))]
    otherwise = f" ELSE {ops.quote_name(default)}" if default else ""
    return RawSQL(
        f"CASE {ops.quote_name('id')} {whens}{otherwise} END", params, output_field=_OUTPUT[kind]()
    )
