"""Token buckets in the database: one upsert statement per request for tokens.

The statement reads the bucket's row, computes what to give from the old values and writes
the new ones, all at once: concurrent requests queue on the row's lock (PostgreSQL) or the
database's write lock (SQLite) for the length of one statement, never a transaction.
Where an upsert returns nothing (MariaDB, MySQL) a read of the row follows it in the same
transaction.
A database server's clock (``Dialect.epoch_seconds``) times every worker alike, whichever
machine it runs on; SQLite serves one machine, whose clock is used.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any

from django.db import connections, router, transaction

from django_outbox.db import dialect, named
from django_outbox.lib.rate import Rate
from django_outbox.models import RateBucket


class DatabaseStore:
    def take(self, key: str, rate: Rate, wanted: int) -> tuple[int, float, float]:
        granted, full_at, now = self._run("take", key, rate, wanted)
        return int(granted), float(full_at), float(now)

    def reserve(self, key: str, rate: Rate) -> tuple[float, float]:
        _granted, full_at, now = self._run("reserve", key, rate, 1)
        return float(full_at), float(now)

    def full_at(self, key: str) -> float:
        found = RateBucket.objects.using(router.db_for_write(RateBucket)).filter(key=key)
        return float(found.values_list("tat", flat=True).first() or 0.0)

    def give_back(self, key: str, rate: Rate, count: int) -> None:
        connection = connections[router.db_for_write(RateBucket)]
        table = connection.ops.quote_name(RateBucket._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                named(
                    "rate-give-back",
                    f"UPDATE {table} SET tat = tat - %s "
                    f"WHERE {connection.ops.quote_name('key')} = %s",
                ),
                [count * rate.interval, key],
            )

    def _run(self, kind: str, key: str, rate: Rate, wanted: int) -> tuple[Any, ...]:
        connection = connections[router.db_for_write(RateBucket)]
        params: dict[str, Any] = {
            "key": key,
            "wanted": wanted,
            "interval": rate.interval,
            "capacity": rate.capacity,
            "burst": rate.burst,
        }
        if not dialect(connection.alias).server_clock:
            params["now"] = time.time()
        if not dialect(connection.alias).update_returning:
            return self._run_then_read(connection, kind, params)
        with connection.cursor() as cursor:
            cursor.execute(_sql(connection.alias, kind) + _returning(connection.alias), params)
            row: tuple[Any, ...] = cursor.fetchone()
        return row

    def _run_then_read(self, connection: Any, kind: str, params: dict[str, Any]) -> Any:
        """Where an upsert returns nothing: the upsert, then a read of the row it wrote,
        in one transaction (the upsert's lock keeps the row as written until then). The
        read's clock is a moment later than the upsert's: a wait it gives is that much
        shorter."""
        quote = connection.ops.quote_name
        table = quote(RateBucket._meta.db_table)
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(_sql(connection.alias, kind), params)
            cursor.execute(
                f"SELECT granted, tat, {_now(connection.alias)} FROM {table} "
                f"WHERE {quote('key')} = %(key)s",
                params,
            )
            return cursor.fetchone()


def _now(alias: str) -> str:
    sql = dialect(alias)
    return sql.epoch_seconds() if sql.server_clock else "%(now)s"


def _returning(alias: str) -> str:
    return f" RETURNING granted, tat, {_now(alias)}"


@lru_cache(maxsize=16)
def _sql(alias: str, kind: str) -> str:
    quote = connections[alias].ops.quote_name
    sql = dialect(alias)
    table = quote(RateBucket._meta.db_table)
    key = quote("key")
    now = _now(alias)
    real = sql.real
    old = f"{table}.tat"
    base = sql.greatest(old, now)
    if kind == "take":
        # As many as the bucket holds now, up to what was asked. Times are seconds since
        # the epoch, exact to about 0.2 µs: the 0.01 of a token absorbs that rounding, so
        # a bucket refilled to exactly one token gives it (hence MAX_RATE in conf).
        room = f"FLOOR(({now} + {real('%(capacity)s')} - {base}) / {real('%(interval)s')} + 0.01)"
        grant = sql.greatest("0", sql.least("%(wanted)s", room))
        first = sql.least("%(wanted)s", "%(burst)s")
    else:  # reserve: one token, always; the caller waits for its turn
        grant = "1"
        first = "1"
    interval = real("%(interval)s")
    return named(
        f"rate-{kind}",
        sql.upsert(
            table,
            [key, "tat", "granted"],
            ["%(key)s", f"{now} + {first} * {interval}", first],
            [key],
            [("granted", grant), ("tat", f"{base} + {grant} * {interval}")],
        ),
    )
