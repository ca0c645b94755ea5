"""Indexes a write keeps up: none that another index already serves (migration 0021)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from django_outbox import webhooks, workflows
from django_outbox.models import Delivery, WorkflowStep
from tests import tasks


def _indexes(table: str) -> dict[str, list[str]]:
    """The table's indexes (unique ones and primary keys too): name -> columns."""
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    return {
        name: list(c["columns"])
        for name, c in found.items()
        if c["index"] or c["unique"] or c["primary_key"]
    }


def _leading(table: str, column: str) -> list[list[str]]:
    return sorted(cols for cols in _indexes(table).values() if cols and cols[0] == column)


@pytest.mark.django_db(transaction=True)
def test_a_delivery_and_a_step_are_found_by_their_parent_through_one_index_only():
    # One index starts with the message (the unique one with the endpoint), one with the
    # workflow (the unique one with the position): no second index to write per row.
    assert _leading("django_outbox_delivery", "message_id") == [["message_id", "endpoint_id"]]
    assert _leading("django_outbox_workflow_step", "workflow_id") == [["workflow_id", "position"]]

    # Migrated back, each table has its own index on the parent again; forward, not.
    call_command("migrate", "django_outbox", "0020", verbosity=0)
    try:
        if connection.vendor != "mysql":  # InnoDB's foreign key always used the unique one
            assert ["message_id"] in _leading("django_outbox_delivery", "message_id")
        assert ["workflow_id"] in _leading("django_outbox_workflow_step", "workflow_id")
    finally:
        call_command("migrate", "django_outbox", verbosity=0)
    assert _leading("django_outbox_delivery", "message_id") == [["message_id", "endpoint_id"]]
    assert _leading("django_outbox_workflow_step", "workflow_id") == [["workflow_id", "position"]]

    # What the indexes served still works: a message's deliveries, a workflow's steps.
    webhooks.create_endpoint("http://hooks.example.com/in", tenant="t")
    message = webhooks.send("order.paid", {"n": 1}, tenant="t")
    assert Delivery.objects.filter(message=message).count() == 1
    run = workflows.group(
        workflows.step(tasks.double, 1), workflows.step(tasks.double, 2)
    ).enqueue()
    assert WorkflowStep.objects.filter(workflow_id=run.id).count() == 2
