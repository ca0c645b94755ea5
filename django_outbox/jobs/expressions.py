"""The few SQL expressions whose spelling differs between PostgreSQL and SQLite.

Everything else the engine writes is ordinary ORM; these are the vendor seam.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import NotSupportedError
from django.db.models import F, Func, JSONField, Value

from django_outbox.lib.resultids import TOKEN_MAX


class _JSONArrayFunc(Func):
    output_field = JSONField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        raise NotSupportedError(f"{type(self).__name__} supports PostgreSQL and SQLite only.")


class JSONAppend(_JSONArrayFunc):
    """``column`` with ``item`` added at the end of its JSON array."""

    def __init__(self, column: str, item: Any) -> None:
        super().__init__(F(column), Value(json.dumps(item)))

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        (column, column_params), (item, item_params) = (
            compiler.compile(expr) for expr in self.get_source_expressions()
        )
        return f"({column} || jsonb_build_array(({item})::jsonb))", [*column_params, *item_params]

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        (column, column_params), (item, item_params) = (
            compiler.compile(expr) for expr in self.get_source_expressions()
        )
        return f"json_insert({column}, '$[#]', json({item}))", [*column_params, *item_params]


class JSONRemoveLast(_JSONArrayFunc):
    """``column`` without the last element of its JSON array."""

    def __init__(self, column: str) -> None:
        super().__init__(F(column))

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        column, params = compiler.compile(self.get_source_expressions()[0])
        return remove_last_sql("postgresql", column), params

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        column, params = compiler.compile(self.get_source_expressions()[0])
        return remove_last_sql("sqlite", column), params


def remove_last_sql(vendor: str, column: str) -> str:
    """SQL for ``column`` (already quoted) without the last element of its JSON array; for
    statements written out rather than built by the ORM."""
    if vendor == "postgresql":
        return f"({column} - -1)"
    if vendor == "sqlite":
        return f"json_remove({column}, '$[#-1]')"
    raise NotSupportedError("JSONRemoveLast supports PostgreSQL and SQLite only.")


def random_token_sql(vendor: str) -> str:
    """SQL for a new job row's token, drawn for each row as ``resultids.new_token()`` draws
    it in Python (1 … TOKEN_MAX); for statements that write job rows without Python seeing
    each one. Written for a statement run with parameters (``%`` doubled)."""
    if vendor == "postgresql":
        return f"(1 + floor(random() * {TOKEN_MAX}))::integer"
    if vendor == "sqlite":
        # random() is a signed 64-bit integer; the remainder keeps abs() from overflowing.
        return f"(abs(random() %% {TOKEN_MAX}) + 1)"
    raise NotSupportedError("random_token_sql supports PostgreSQL and SQLite only.")
