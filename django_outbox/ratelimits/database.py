"""Token buckets in the database: one upsert statement per request for tokens.

The statement reads the bucket's row, computes what to give from the old values and writes
the new ones, all at once: concurrent requests queue on the row's lock (PostgreSQL) or the
database's write lock (SQLite) for the length of one statement, never a transaction.
PostgreSQL's clock (``statement_timestamp()``) times every worker alike, whichever machine
it runs on; SQLite serves one machine, whose clock is used.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any

from django.db import connections, router

from django_outbox.lib.rate import Rate
from django_outbox.models import RateBucket


class DatabaseStore:
    def take(self, key: str, rate: Rate, wanted: int) -> tuple[int, float, float]:
        granted, full_at, now = self._run("take", key, rate, wanted)
        return int(granted), float(full_at), float(now)

    def reserve(self, key: str, rate: Rate) -> tuple[float, float]:
        _granted, full_at, now = self._run("reserve", key, rate, 1)
        return float(full_at), float(now)

    def give_back(self, key: str, rate: Rate, count: int) -> None:
        connection = connections[router.db_for_write(RateBucket)]
        table = connection.ops.quote_name(RateBucket._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET tat = tat - %s WHERE {connection.ops.quote_name('key')} = %s",
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
        if connection.vendor != "postgresql":
            params["now"] = time.time()
        with connection.cursor() as cursor:
            cursor.execute(_sql(connection.alias, connection.vendor, kind), params)
            row: tuple[Any, ...] = cursor.fetchone()
        return row


@lru_cache(maxsize=16)
def _sql(alias: str, vendor: str, kind: str) -> str:
    quote = connections[alias].ops.quote_name
    table = quote(RateBucket._meta.db_table)
    key = quote("key")
    if vendor == "postgresql":
        now = "EXTRACT(EPOCH FROM statement_timestamp())::float8"
        most, least, cast = "GREATEST", "LEAST", "::float8"
    else:
        now, most, least, cast = "%(now)s", "MAX", "MIN", ""
    old = f"{table}.tat"
    base = f"{most}({old}, {now})"
    if kind == "take":
        # As many as the bucket holds now, up to what was asked. Times are seconds since
        # the epoch, exact to about 0.2 µs: the 0.01 of a token absorbs that rounding, so
        # a bucket refilled to exactly one token gives it (hence MAX_RATE in conf).
        room = f"FLOOR(({now} + %(capacity)s{cast} - {base}) / %(interval)s{cast} + 0.01)"
        grant = f"{most}(0, {least}(%(wanted)s, {room}))"
        first = f"{least}(%(wanted)s, %(burst)s)"
    else:  # reserve: one token, always; the caller waits for its turn
        grant = "1"
        first = "1"
    return (
        f"INSERT INTO {table} ({key}, tat, granted) "
        f"VALUES (%(key)s, {now} + {first} * %(interval)s{cast}, {first}) "
        f"ON CONFLICT ({key}) DO UPDATE SET granted = {grant}, "
        f"tat = {base} + {grant} * %(interval)s{cast} "
        f"RETURNING granted, tat, {now}"
    )
