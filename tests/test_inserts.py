"""``db.inserts.Batches``: the statements of a bulk write sent one after another, each
without waiting for the result of the one before where the database can (PostgreSQL's
pipeline mode); keys read in order; a failed statement raised as Django's error."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from django_outbox.db.inserts import Batches
from django_outbox.models import WorkflowEdge

pytestmark = pytest.mark.django_db


def _row(n: int) -> tuple[int, int, int]:
    return (n, n + 1000, n)


#: A table of plain numbers: parent, child, position (the workflow is given once).
NAMES = ("parent", "child", "position")
TAKEN = 10**9


def _send(batches: Batches, rows: list[tuple[int, int, int]], read: list[list[int]] | None) -> None:
    """Send ``rows``; their keys, once read, are appended to ``read`` (None: no keys)."""
    then = None if read is None else read.append
    batches.insert_alike("test-batches", WorkflowEdge, {"workflow": 7}, NAMES, rows, then)


def _send_taken(batches: Batches, read: list[list[int]] | None) -> None:
    """A row whose primary key is taken."""
    then = None if read is None else read.append
    batches.insert_alike(
        "test-batches", WorkflowEdge, {"workflow": 7}, ("id", *NAMES), [(TAKEN, 1, 2, 0)], then
    )


def _pipelined() -> bool:
    return connection.connection.info.pipeline_status.name == "ON"


def _edges() -> list[int]:
    return sorted(WorkflowEdge.objects.values_list("parent", flat=True))


def test_each_batchs_keys_are_read_in_the_order_sent():
    with transaction.atomic(), Batches("default") as batches:
        if connection.vendor == "postgresql":  # sent ahead: the driver is in pipeline mode
            assert _pipelined()
        read: list[list[int]] = []
        _send(batches, [_row(n) for n in range(3)], read)
        _send(batches, [_row(n) for n in range(3, 5)], read)
        assert len(read) == 1  # the first batch's keys, read once the second was sent
        batches.flush()
        first, second = read
    assert len(first) == 3 and len(second) == 2 and first + second == sorted(first + second)
    stored = dict(WorkflowEdge.objects.values_list("pk", "child"))
    assert [stored[pk] for pk in first + second] == [n + 1000 for n in range(5)]
    assert connection.vendor != "postgresql" or not _pipelined()


def test_a_failed_batch_is_djangos_error_where_its_keys_are_read_and_undoes_its_savepoint():
    WorkflowEdge.objects.create(pk=TAKEN, workflow_id=7, parent_id=-1, child_id=-1)
    with transaction.atomic():
        with pytest.raises(IntegrityError), transaction.atomic(), Batches("default") as batches:
            read: list[list[int]] = []
            _send(batches, [_row(1)], read)
            _send_taken(batches, read)
            assert [len(keys) for keys in read] == [1]
            _send(batches, [_row(3)], read)  # the taken key's batch is read: raised here
        # The transaction goes on after the savepoint's rollback.
        WorkflowEdge.objects.create(workflow_id=7, parent_id=-2, child_id=-2)
    assert _edges() == [-2, -1]


def test_a_failed_statement_nobody_reads_is_raised_where_the_block_ends():
    WorkflowEdge.objects.create(pk=TAKEN, workflow_id=7, parent_id=-1, child_id=-1)
    with pytest.raises(IntegrityError), transaction.atomic(), Batches("default") as batches:
        _send(batches, [_row(1)], None)
        _send_taken(batches, None)
        _send(batches, [_row(3)], None)
    assert _edges() == [-1]
