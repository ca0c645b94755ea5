"""Multi-row INSERTs written out: for the batches a worker writes over and over, and for
bulk writes, whose statements ``Batches`` sends one after another.

``bulk_create()`` builds model instances and compiles its statement for every batch; for a
busy worker's attempt log that cost more CPU than PostgreSQL spent running the statement.
Values are adapted by each field's own ``get_db_prep_save``, as the ORM would.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import cache
from typing import Any

from django.db import connections, router
from django.db.models import Model

from django_outbox.db import Dialect, dialect, named
from django_outbox.db.rowvalues import any_array_literal, quoted_array_literal


def insert_rows(
    name: str, model: type[Model], names: Sequence[str], rows: Sequence[Sequence[Any]]
) -> list[int]:
    """Insert ``rows`` (values in the order of the field ``names``) in one statement (named
    ``name``); returns the new primary keys, in the order of ``rows``."""
    if not rows:
        return []
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in names]
    prepared = [
        [
            field.get_db_prep_save(value, connection)  # type: ignore[union-attr]
            for field, value in zip(fields, row, strict=True)
        ]
        for row in rows
    ]
    assert model._meta.pk is not None
    pk = quote(str(model._meta.pk.column))
    columns = [quote(str(field.column)) for field in fields]  # type: ignore[union-attr]
    into = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(columns)}) "
    params: list[Any] = []
    sql_dialect = dialect(connection.alias)
    if not sql_dialect.insert_returning:
        placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
        with connection.cursor() as cursor:
            cursor.execute(
                named(name, f"{into}VALUES {', '.join([placeholders] * len(rows))}"),
                [value for row in prepared for value in row],
            )
            return sql_dialect.inserted_ids(cursor, len(rows))
    if sql_dialect.array_parameters:
        # One array per column: the same statement text for any number of rows, which
        # psycopg converts once (a VALUES list of N rows is a new text to parse each time),
        # each written as its text form at once (psycopg would quote element by element).
        arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for field in fields)
        sql = f"{into}SELECT * FROM unnest({arrays}) RETURNING {pk}"
        params = [any_array_literal(values) for values in zip(*prepared, strict=True)]
    else:
        placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
        sql = f"{into}VALUES {', '.join([placeholders] * len(rows))} RETURNING {pk}"
        params = [value for row in prepared for value in row]
    with connection.cursor() as cursor:
        cursor.execute(named(name, sql), params)
        # Both databases return the inserted rows in the order given (bulk_create relies on
        # it too).
        return [row[0] for row in cursor.fetchall()]


def insert_alike(
    name: str,
    model: type[Model],
    shared: dict[str, Any],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    most: int = 1000,
    returning: bool = True,
) -> list[int]:
    """Insert one row per item of ``rows``, at most ``most`` per statement (named
    ``name``; fewer where the database caps a statement's parameters lower): its fields
    ``names`` from the item, every field of ``shared`` (name -> value) the same in all.
    Returns the new primary keys, in the order of ``rows`` (with ``returning=False``,
    for a table whose keys the rows give, nothing: [] ).

    The rows' values go as they are stored: numbers, and JSON already written as text. The
    shared values are adapted once, by each field's ``get_db_prep_save``. On PostgreSQL the
    statement is ``INSERT … SELECT <shared>, u.* FROM unnest(<one array per name>)``: a few
    parameters whatever the number of rows, each array one string built in C; elsewhere a
    multi-row ``VALUES`` (MySQL's ids as ``Dialect.inserted_ids`` finds them). The
    statements go one after another as ``Batches`` sends them.
    """
    if not rows:
        return []
    using = router.db_for_write(model)
    most = rows_per_statement(using, len(shared) + len(names), most)
    keys: list[int] = []
    with Batches(using) as batches:
        for start in range(0, len(rows), most):
            chunk = rows[start : start + most]
            batches.insert_alike(
                name, model, shared, names, chunk, keys.extend if returning else None
            )
        batches.flush()
    return keys


def rows_per_statement(using: str, columns: int, most: int = 1000) -> int:
    """At most ``most`` rows of ``columns`` values in one statement, fewer where the
    database caps a statement's parameters lower (SQLite's: Django 5.2 says 999)."""
    capped = connections[using].features.max_query_params
    return max(1, min(most, capped // columns)) if capped else most


class Batches:
    """The statements of a bulk write, each sent without waiting for the result of the one
    before where the database can (``Dialect.pipelines``: PostgreSQL's pipeline mode,
    psycopg's ``Connection.pipeline()``), so that the server writes one batch while Python
    makes the next. Elsewhere each statement runs when it is sent.

    A batch's new keys go to the ``then`` it was sent with once the next batch has been
    sent (or at ``flush()``), oldest first: the caller's work on them meets the server's
    on the next. A statement's error is raised where its keys are read, or where the block
    ends for one that returns none, as Django's error (IntegrityError and so on), and the
    caller's transaction is then to be rolled back, as after any failed statement. Use it
    inside ``transaction.atomic()``; one block at a time per connection.
    """

    def __init__(self, using: str) -> None:
        self.using = using
        self.connection = connections[using]
        self.dialect = dialect(using)
        #: Batches sent whose keys are still to be read, oldest first: the cursor, its
        #: number of rows and where its keys go.
        self._unread: deque[tuple[Any, int, Callable[[list[int]], None]]] = deque()
        self._pipeline: AbstractContextManager[Any] | None = None

    def __enter__(self) -> Batches:
        if self.dialect.pipelines:
            self.connection.ensure_connection()
            raw = self.connection.connection
            if getattr(type(raw), "pipeline", None) is not None and _pipelines_supported():
                self._pipeline = raw.pipeline()
                with self.connection.wrap_database_errors:
                    self._pipeline.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for cursor, _, _ in self._unread:
            cursor.close()
        self._unread.clear()
        if self._pipeline is not None:
            # The results nobody read are waited for here; an error among them is raised
            # as Django's (unless the block is already raising one).
            with self.connection.wrap_database_errors:
                self._pipeline.__exit__(*exc)
            self._pipeline = None

    def insert_alike(
        self,
        name: str,
        model: type[Model],
        shared: dict[str, Any],
        names: Sequence[str],
        rows: Sequence[Sequence[Any]],
        then: Callable[[list[int]], None] | None = None,
    ) -> None:
        """Send one statement inserting ``rows`` (see ``insert_alike``: at most
        ``rows_per_statement`` of them). With ``then``, it returns their keys, which go to
        ``then`` (in the order of ``rows``) once the next batch is sent, or at ``flush()``."""
        sql, params = _alike_statement(
            self.connection, self.dialect, model, shared, names, rows, then is not None
        )
        cursor = self.connection.cursor()
        try:
            cursor.execute(named(name, sql), params)
        except BaseException:
            cursor.close()
            raise
        if then is None:
            cursor.close()
            return
        self._unread.append((cursor, len(rows), then))
        if len(self._unread) > 1:  # one batch ahead of the server, not more
            self._read_oldest()

    def flush(self) -> None:
        """Read the keys of every batch not read yet, oldest first."""
        while self._unread:
            self._read_oldest()

    def _read_oldest(self) -> None:
        cursor, count, then = self._unread.popleft()
        try:
            if not self.dialect.insert_returning:
                keys = self.dialect.inserted_ids(cursor, count)
            else:
                # One statement's new keys rise in the order its rows were written, which
                # is the order given: sorted, they pair with the rows whatever order
                # RETURNING took.
                keys = sorted(row[0] for row in cursor.fetchall())
        finally:
            cursor.close()
        then(keys)


def _alike_statement(
    connection: Any,
    sql_dialect: Dialect,
    model: type[Model],
    shared: dict[str, Any],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    returning: bool,
) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    meta = model._meta
    shared_fields = [meta.get_field(field) for field in shared]
    shared_values = [
        field.get_db_prep_save(value, connection)  # type: ignore[union-attr]
        for field, value in zip(shared_fields, shared.values(), strict=True)
    ]
    fields = [meta.get_field(field) for field in names]
    columns = [quote(str(field.column)) for field in [*shared_fields, *fields]]  # type: ignore[union-attr]
    assert meta.pk is not None
    pk = quote(str(meta.pk.column))
    into = f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "
    params: list[Any]
    if sql_dialect.array_parameters:
        arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for field in fields)
        given = ", ".join([*(["%s"] * len(shared_values)), "u.*"])
        sql = f"{into}SELECT {given} FROM unnest({arrays}) AS u"
        params = [
            *shared_values,
            *(
                quoted_array_literal([None if value is None else str(value) for value in column])
                for column in zip(*rows, strict=True)
            ),
        ]
    else:
        placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
        sql = f"{into}VALUES {', '.join([placeholders] * len(rows))}"
        params = [value for row in rows for value in (*shared_values, *row)]
    if returning and sql_dialect.insert_returning:
        sql = f"{sql} RETURNING {pk}"
    return sql, params


@cache
def _pipelines_supported() -> bool:
    """psycopg's pipeline mode needs libpq 14 or newer."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg 2 has no pipeline mode
        return False
    return bool(psycopg.Pipeline.is_supported())
