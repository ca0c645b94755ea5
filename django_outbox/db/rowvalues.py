"""One UPDATE writing a different value to each row: ``CASE id WHEN … THEN … END`` on
SQLite, a lookup in two arrays on PostgreSQL.

Written as raw SQL with adapted parameters: building the same CASE from ORM expressions
costs more Python than the statement costs the database, and batched writes (job outcomes,
webhook attempts) run it for every batch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import CharField, DateTimeField, IntegerField, JSONField
from django.db.models.expressions import RawSQL

from django_outbox.db import dialect

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

    On PostgreSQL the keys and values go as two array parameters, each row's value found
    with ``array_position``: the statement's text is then the same for every batch, so
    psycopg converts it once (from its cache) instead of parsing a CASE of two placeholders
    per row each time. (``array_position`` scans the keys in C; a subquery over ``unnest``
    of the two arrays costs PostgreSQL a join per batch.)
    """
    connection = connections[using]
    ops = connection.ops
    key = ops.quote_name("id")
    if dialect(using).array_parameters:
        keys = array_literal([pk for pk, _value in pairs])
        values, cast = postgres_array(using, [value for _pk, value in pairs], kind)
        lookup = f"(%s::{cast}[])[array_position(%s::bigint[], {key})]"
        if default is None:
            return RawSQL(lookup, [values, keys], output_field=_OUTPUT[kind]())
        return RawSQL(
            f"CASE WHEN {key} = ANY(%s::bigint[]) THEN {lookup} ELSE {ops.quote_name(default)} END",
            [keys, values, keys],
            output_field=_OUTPUT[kind](),
        )
    adapt = _adapter(using, kind)
    whens = " ".join(["WHEN %s THEN %s"] * len(pairs))
    params = [param for pk, value in pairs for param in (pk, adapt(value))]
    otherwise = f" ELSE {ops.quote_name(default)}" if default else ""
    return RawSQL(f"CASE {key} {whens}{otherwise} END", params, output_field=_OUTPUT[kind]())


#: Marks a row with no value of its own in postgres_array(): SQL NULL, even in JSON.
NO_VALUE: Any = object()


def postgres_array(using: str, values: Sequence[Any], kind: str) -> tuple[Any, str]:
    """``values`` as one PostgreSQL array parameter, and the array's element type.

    None stays SQL NULL, except in JSON, where it is the JSON null, as the ORM has it;
    NO_VALUE is SQL NULL in every kind."""
    if kind == "json":  # the ORM's JSONField writes json.dumps() of the value
        texts = [None if v is NO_VALUE else json.dumps(v) for v in values]
        return quoted_array_literal(texts), _POSTGRES_CAST[kind]
    if kind == "text":
        texts = [None if v is NO_VALUE or v is None else str(v) for v in values]
        return quoted_array_literal(texts), _POSTGRES_CAST[kind]
    adapt = _adapter(using, kind)
    adapted = [None if v is NO_VALUE or v is None else adapt(v) for v in values]
    return array_literal(adapted), _POSTGRES_CAST[kind]


def any_array_literal(values: Sequence[Any]) -> str:
    """Values as prepared for the database (numbers, booleans, times, texts, psycopg's
    Json wrappers, None) as one PostgreSQL array literal, each element in its text form:
    for a column of a multi-row INSERT sent as an array."""
    return quoted_array_literal([None if value is None else _text_form(value) for value in values])


def _text_form(value: Any) -> str:
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (str, int)):
        return str(value)
    if hasattr(value, "obj") and hasattr(value, "dumps"):  # psycopg's Json and Jsonb
        return str((value.dumps or json.dumps)(value.obj))
    raise TypeError(f"no array text form for {value!r}")


def quoted_array_literal(texts: Sequence[str | None]) -> str:
    """A PostgreSQL array of texts (None: NULL), each element quoted and escaped, in its
    text form: ``{"a","b \\"c\\"",NULL}``. psycopg would dump a list of values element by
    element in Python; this is a few string methods in C for the whole batch."""
    return (
        "{"
        + ",".join(
            [
                "NULL"
                if text is None
                else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
                for text in texts
            ]
        )
        + "}"
    )


def _adapter(using: str, kind: str) -> Any:
    ops = connections[using].ops
    return {
        "datetime": ops.adapt_datetimefield_value,
        "json": lambda value: ops.adapt_json_value(value, None),
        "int": int,
        "text": str,
    }[kind]


def among(using: str, column: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
    """``column`` is one of ``ids``: ``= ANY(array)`` on PostgreSQL (one parameter, the same
    text for any number), ``IN (…)`` elsewhere."""
    if dialect(using).array_parameters:
        return f"{column} = ANY(%s::bigint[])", [array_literal(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)


def among_texts(using: str, column: str, texts: Sequence[str]) -> tuple[str, list[Any]]:
    """``column`` is one of ``texts``: as ``among()``, for texts."""
    if dialect(using).array_parameters:
        return f"{column} = ANY(%s::text[])", [quoted_array_literal(texts)]
    return f"{column} IN ({', '.join(['%s'] * len(texts))})", list(texts)


def array_literal(values: Sequence[int | datetime | None]) -> str:
    """A PostgreSQL array of whole numbers or times, written as its text form: ``{1,2,NULL}``.

    psycopg would dump a Python list element by element in Python (under Django's
    client-side binding); this costs a third of that for 500 elements. Only numbers and
    ISO 8601 times go this way: their text holds no comma, quote, brace or backslash to
    escape. A naive time means the session's time zone, as psycopg sends it."""
    kinds = set(map(type, values))
    if kinds <= {int}:  # the usual cases, at C speed: ids, attempts ...
        return "{" + ",".join(map(str, values)) + "}"
    if kinds <= {datetime}:  # ... and finishing times
        return "{" + ",".join([value.isoformat() for value in values]) + "}"  # type: ignore[union-attr]
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif isinstance(value, datetime):
            parts.append(value.isoformat())
        elif isinstance(value, int) and not isinstance(value, bool):
            parts.append(str(value))
        else:
            raise TypeError(f"array_literal takes whole numbers and datetimes, not {value!r}")
    return "{" + ",".join(parts) + "}"
