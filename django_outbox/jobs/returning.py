"""UPDATE statements the ORM builds but Django's ``update()`` cannot run: with ``RETURNING``
(``update()`` returns only a row count), or on a connection Django does not manage.

PostgreSQL and SQLite (3.35+) both accept ``RETURNING`` after an UPDATE; MariaDB and MySQL
do not, and lock, update and read instead. The ORM builds the statement and the returned
columns go through the converters the ORM would apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections, transaction
from django.db.models import Field, JSONField, Model, QuerySet
from django.db.models.sql import UpdateQuery

from django_outbox.db import dialect, named


def update_returning(
    name: str, queryset: QuerySet[Any], values: dict[str, Any], returning: Sequence[str]
) -> list[dict[str, Any]]:
    """Apply ``values`` to the rows of ``queryset`` in one statement (named ``name``, see
    ``django_outbox.db.named``); return, for each row changed, the fields named in
    ``returning`` (after the change), in no particular order."""
    connection = connections[queryset.db]
    columns = ", ".join(connection.ops.quote_name(column(queryset.model, n)) for n in returning)
    try:
        sql, params = update_sql(queryset, values)
    except EmptyResultSet:  # it selects nothing (say, ids among an empty list)
        return []
    if not dialect(queryset.db).update_returning:
        rows = _lock_update_read(name, queryset, values, columns)
    else:
        with connection.cursor() as cursor:
            cursor.execute(named(name, f"{sql} RETURNING {columns}"), params)
            rows = cursor.fetchall()
    decode = returned_rows(connection, queryset.model, returning)
    return [decode(row) for row in rows]


def _lock_update_read(
    name: str, queryset: QuerySet[Any], values: dict[str, Any], columns: str
) -> list[tuple[Any, ...]]:
    """``UPDATE … RETURNING`` where UPDATE returns nothing: in one transaction, lock the
    rows (their ids), update them, read them back."""
    connection = connections[queryset.db]
    table = connection.ops.quote_name(queryset.model._meta.db_table)
    with transaction.atomic(using=queryset.db):
        ids = list(queryset.select_for_update().values_list("pk", flat=True))
        if not ids:
            return []
        mine = queryset.model._default_manager.using(queryset.db).filter(pk__in=ids)
        sql, params = update_sql(mine, values)
        placeholders = ", ".join(["%s"] * len(ids))
        with connection.cursor() as cursor:
            cursor.execute(named(name, sql), params)
            cursor.execute(f"SELECT {columns} FROM {table} WHERE id IN ({placeholders})", ids)
            return list(cursor.fetchall())


def update_sql(queryset: QuerySet[Any], values: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The UPDATE that ``queryset.update(**values)`` would run, as SQL and parameters."""
    query: Any = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(queryset.db).as_sql()
    return sql, tuple(params)


def column(model: type[Model], name: str) -> str:
    """The column of ``model``'s field ``name``."""
    return str(_field(model, name).column)


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def returned_rows(connection: Any, model: type[Model], names: Sequence[str]) -> Any:
    """A function turning one returned row of the columns of ``names`` into a dict of
    Python values, as the ORM would."""
    values = returned_values(connection, model, names)
    return lambda row: dict(zip(names, values(row), strict=True))


def returned_values(connection: Any, model: type[Model], names: Sequence[str]) -> Any:
    """A function turning one returned row of the columns of ``names`` into a list of
    Python values in the same order, as the ORM would (cached: a claim asks for it)."""
    key = (connection.alias, model, tuple(names))
    decode = _decoders.get(key)
    if decode is None:
        decode = _decoders[key] = _row_decoder(
            connection, model, [_field(model, name) for name in names]
        )
    return decode


_decoders: dict[tuple[Any, ...], Any] = {}


def _row_decoder(connection: Any, model: type[Model], fields: list[Field[Any, Any]]) -> Any:
    """Apply the same converters the ORM would to each returned column; columns without
    any (most of them, on PostgreSQL) are passed through untouched."""
    table = model._meta.db_table
    plan = []
    for index, field in enumerate(fields):
        column = field.get_col(table)
        converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if isinstance(field, JSONField) and field.decoder is None:
            converters = [_with_empty_fast_path(converters)]
        if converters:
            plan.append((index, column, converters))

    def decode(row: tuple[Any, ...]) -> list[Any]:
        values = list(row)
        for index, column, converters in plan:
            value = values[index]
            for converter in converters:
                value = converter(value, column, connection)
            values[index] = value
        return values

    return decode


#: JSON texts most job rows hold (no arguments, no errors yet), and their values.
_EMPTY_JSON: dict[str, Any] = {"[]": list, "{}": dict}


def _with_empty_fast_path(converters: list[Any]) -> Any:
    """``converters`` of a JSON column as one, skipping ``json.loads`` for ``[]``, ``{}`` and
    ``["one string"]``: a claim decodes four JSON columns per job, and for jobs without
    arguments or errors the decoder cost more than the rest of the row."""

    def convert(value: Any, expression: Any, connection: Any) -> Any:
        if isinstance(value, str):
            empty = _EMPTY_JSON.get(value)
            if empty is not None:
                return empty()
            # A list of one plain string (a first attempt's worker ids): no quote or
            # backslash inside means no escapes to undo.
            if value[:2] == '["' and value[-2:] == '"]':
                inner = value[2:-2]
                if '"' not in inner and "\\" not in inner:
                    return [inner]
        for converter in converters:
            value = converter(value, expression, connection)
        return value

    return convert
