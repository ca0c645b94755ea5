"""Which job table the suite runs against: one table, or (OUTBOX_TEST_PARTITIONED=1, on
PostgreSQL) the partitioned one of ``manage.py outbox_partition`` (tests/conftest.py)."""

from __future__ import annotations

import os

import pytest

PARTITIONED = os.environ.get("OUTBOX_TEST_PARTITIONED") == "1"

#: A test of what only one table does: rows that stay on their page, migrations of it.
one_table_only = pytest.mark.skipif(
    PARTITIONED, reason="a partitioned job table moves finished rows and is not migrated"
)
