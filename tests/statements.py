"""The names of the statements a test captured (``django_outbox.db.named``)."""

from __future__ import annotations

from typing import Any

from django_outbox.db import statement_name


def names(queries: Any) -> list[str | None]:
    """Each captured statement's name, in order (None: a statement the ORM wrote)."""
    captured = getattr(queries, "captured_queries", queries)
    return [statement_name(query["sql"]) for query in captured]
