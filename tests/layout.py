"""Which job table the suite runs against: one table, or (OUTBOX_TEST_PARTITIONED=1, on
PostgreSQL) the partitioned one of ``manage.py outbox_partition`` (tests/conftest.py)."""

from __future__ import annotations

import os

import pytest

PARTITIONED = os.environ.get("OUTBOX_TEST_PARTITIONED") == "1"

#: A test of what only one table does: rows that stay on their page, migrations of it,
#: settings without OUTBOX["RETENTION"]["PARTITIONS"] that a partitioned table wants.
one_table_only = pytest.mark.skipif(
    PARTITIONED,
    reason="one job table only (a partitioned one moves finished rows, is not migrated "
    "and wants its setting)",
)
