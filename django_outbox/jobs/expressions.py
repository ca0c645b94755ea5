"""ORM expressions whose SQL differs between databases: each asks the database's dialect
(``django_outbox.db``) for its spelling."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import F, Func, JSONField, Value

from django_outbox.db import dialect


class JSONAppend(Func):
    """``column`` with ``item`` added at the end of its JSON array."""

    output_field = JSONField()

    def __init__(self, column: str, item: Any) -> None:
        super().__init__(F(column), Value(json.dumps(item)))

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        (column, column_params), (item, item_params) = (
            compiler.compile(expr) for expr in self.get_source_expressions()
        )
        sql = dialect(connection.alias).json_append(column, item)
        return sql, [*column_params, *item_params]


class JSONRemoveLast(Func):
    """``column`` without the last element of its JSON array."""

    output_field = JSONField()

    def __init__(self, column: str) -> None:
        super().__init__(F(column))

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        column, params = compiler.compile(self.get_source_expressions()[0])
        return dialect(connection.alias).json_remove_last(column), params
