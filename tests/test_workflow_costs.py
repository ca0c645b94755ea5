"""What a workflow costs the database: statements follow the work, not the fan-out."""

from __future__ import annotations

import django
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_outbox import workflows
from django_outbox.jobs.claim import claim
from django_outbox.jobs.complete import Outcome, complete
from django_outbox.models import Job, JobStatus, WorkflowStep
from tests import tasks

pytestmark = pytest.mark.django_db

ERROR = {"exception_class_path": "builtins.ValueError", "traceback": "ValueError: boom"}


def _splits_inserts() -> bool:
    """Django 5.2 takes SQLite's parameter limit as 999 (6.0 asks SQLite: 32,766), so its
    bulk_create() writes a job row INSERT for each 34 rows there."""
    return connection.vendor == "sqlite" and django.VERSION < (6, 0)


def _dag(members: int) -> workflows.Workflow:
    """``members`` steps side by side, each with a child of its own, and a callback that
    waits for every member."""
    wf = workflows.Workflow()
    handles = [wf.add(workflows.step(tasks.double, n)) for n in range(members)]
    for handle in handles:
        wf.add(workflows.step(tasks.double), after=[handle])
    wf.add(workflows.step(tasks.total), after=handles)
    return wf


def _unnamed(sql: str) -> str:
    """``sql`` without the name comment a named statement starts with (db/named)."""
    return sql.split("*/", 1)[1] if sql.startswith("/*") else sql


def _enqueue_statements(members: int) -> list[str]:
    """The statements of the enqueue, savepoints aside, by their first word and table."""
    with CaptureQueriesContext(connection) as queries:
        _dag(members).enqueue()
    said = [" ".join(_unnamed(q["sql"]).split()[:3]).replace("`", '"') for q in queries]
    return [s for s in said if "SAVEPOINT" not in s.upper()]


def test_enqueueing_a_workflow_takes_the_same_statements_for_5_steps_or_600():
    if _splits_inserts():
        pytest.skip("Django 5.2 splits SQLite inserts at 999 parameters (see _splits_inserts)")
    small, large = _enqueue_statements(2), _enqueue_statements(300)
    assert small == large
    assert small == [
        'INSERT INTO "django_outbox_workflow"',
        'INSERT INTO "django_outbox_job"',
        'INSERT INTO "django_outbox_workflow_step"',
        'INSERT INTO "django_outbox_workflow_edge"',
    ]


def _claim_members(count: int) -> list:
    claimed = claim("w1", ["default"], 2 * count + 1, 30)
    assert len(claimed) == count  # the members only: the rest wait
    return claimed


@pytest.mark.parametrize("succeeded", [True, False], ids=["succeeded", "failed"])
def test_a_completion_batch_releases_or_takes_down_in_the_same_statements_for_any_size(
    succeeded,
):
    counts = []
    for members in (3, 200):
        _dag(members).enqueue()
        claimed = _claim_members(members)
        if succeeded:
            outcomes = [Outcome(job, succeeded=True, return_value=1) for job in claimed]
        else:
            outcomes = [Outcome(job, succeeded=False, error=ERROR, final=True) for job in claimed]
        with CaptureQueriesContext(connection) as queries:
            assert complete("w1", outcomes) == members
        counts.append(len(queries))
        Job.objects.all().delete()
    assert counts[0] == counts[1]


def test_the_callbacks_count_is_taken_down_without_reading_its_siblings():
    wf = _dag(50)
    wf.enqueue()
    callback = WorkflowStep.objects.order_by("-position").first()
    claimed = _claim_members(50)
    complete("w1", [Outcome(job, succeeded=True, return_value=1) for job in claimed[:49]])
    callback.refresh_from_db()
    assert callback.waiting_on == 1 and callback.job.status == JobStatus.WAITING
    complete("w1", [Outcome(claimed[49], succeeded=True, return_value=1)])
    callback.refresh_from_db()
    assert callback.waiting_on == 0 and callback.job.status == JobStatus.QUEUED


def test_a_failure_at_the_head_of_a_chain_of_1200_steps_takes_down_every_one_below():
    """Deeper than MariaDB's and MySQL's default limit on a recursive read (1,000)."""
    from django_outbox import workflows

    run = workflows.chain(
        workflows.step(tasks.fails_for_good, "first"),
        *(workflows.step(tasks.noop).immutable() for _ in range(1199)),
    ).enqueue()
    (head,) = claim("w1", ["default"], 5, 30)
    complete("w1", [Outcome(head, succeeded=False, error=ERROR, final=True)])
    done = workflows.get(run.id)
    assert (done.status, done.finished) == ("failed", True)
    assert {s.status for s in done.steps[1:]} == {"upstream_failed"}


def test_a_step_whose_worker_died_on_its_last_attempt_takes_down_what_waits_for_it():
    from datetime import timedelta

    from django.utils import timezone

    from django_outbox import workflows
    from django_outbox.jobs.leases import rescue_expired

    run = workflows.chain(
        workflows.step(tasks.fails_for_good, "never reported"),
        workflows.step(tasks.noop).immutable(),
        workflows.step(tasks.noop).immutable().always(),
    ).enqueue()
    (head,) = claim("w1", ["default"], 5, 30)  # its only attempt; then the worker dies
    Job.objects.filter(pk=head.id).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert rescue_expired().failed == 1
    done = workflows.get(run.id)
    assert [s.status for s in done.steps] == ["failed", "upstream_failed", "queued"]
    assert done.status == "failed" and not done.finished  # the clean-up step is to run
