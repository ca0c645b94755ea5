from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.jobs.claim import claim
from django_outbox.jobs.complete import Outcome, complete
from django_outbox.models import Job, JobStatus
from tests.statements import names, plan_of

pytestmark = pytest.mark.django_db

ERROR = {"exception_class_path": "builtins.ValueError", "traceback": "ValueError: boom"}


def test_one_update_per_outcome_for_the_whole_batch(job_factory):
    job_factory.create_batch(30, max_attempts=2)
    first, second, third = (claim("w1", ["default"], 10, 30) for _ in range(3))
    outcomes = [Outcome(job, succeeded=True, return_value={"n": job.id}) for job in first]
    outcomes += [Outcome(job, succeeded=False, error=ERROR) for job in second]  # will retry
    for job in third:
        job.max_attempts = job.attempts  # last attempt: these fail for good
    outcomes += [Outcome(job, succeeded=False, error=ERROR) for job in third]
    with CaptureQueriesContext(connection) as queries:
        stored = complete("w1", outcomes)
    assert stored == 30
    assert names(queries) == ["complete-succeeded", "complete-retried", "complete-failed"]

    succeeded = Job.objects.filter(pk__in=[j.id for j in first])
    assert all(j.status == JobStatus.SUCCEEDED and j.return_value == {"n": j.pk} for j in succeeded)
    assert all(j.finished_at and j.lease_until is None for j in succeeded)
    retried = Job.objects.filter(pk__in=[j.id for j in second])
    finished = {o.job.id: o.finished_at for o in outcomes}
    assert all(j.status == JobStatus.QUEUED and j.run_at > finished[j.pk] for j in retried)
    assert all(j.errors == [ERROR] and j.worker_id is None for j in retried)
    failed = Job.objects.filter(pk__in=[j.id for j in third])
    assert all(j.status == JobStatus.FAILED and j.errors == [ERROR] for j in failed)


def test_retry_waits_a_backoff_below_the_ceiling(job_factory):
    job_factory(backoff_base=10, backoff_cap=20, max_attempts=5)
    (job,) = claim("w1", ["default"], 1, 30)
    outcome = Outcome(job, succeeded=False, error=ERROR)
    complete("w1", [outcome])
    wait = Job.objects.get(pk=job.id).run_at - outcome.finished_at
    assert timedelta(0) < wait <= timedelta(seconds=10)  # attempt 1: ceiling = base


def test_a_result_after_a_lost_lease_is_dropped(job_factory):
    job_factory()
    (job,) = claim("w1", ["default"], 1, 30)
    # Meanwhile the lease ran out and another worker took the job.
    Job.objects.filter(pk=job.id).update(worker_id="w2")
    assert complete("w1", [Outcome(job, succeeded=True, return_value=1)]) == 0
    stored = Job.objects.get(pk=job.id)
    assert stored.status == JobStatus.RUNNING and stored.worker_id == "w2"


def test_a_late_result_of_an_earlier_run_does_not_land_on_the_next_run(job_factory):
    job_factory()
    (first_run,) = claim("w1", ["default"], 1, 30)
    # The lease ran out, the job was taken back, and the same worker claimed it again.
    Job.objects.filter(pk=first_run.id).update(status=JobStatus.QUEUED, worker_id=None)
    (second_run,) = claim("w1", ["default"], 1, 30)
    assert complete("w1", [Outcome(first_run, succeeded=True, return_value="stale")]) == 0
    stored = Job.objects.get(pk=first_run.id)
    assert (stored.status, stored.attempts, stored.return_value) == (JobStatus.RUNNING, 2, None)
    assert complete("w1", [Outcome(second_run, succeeded=True, return_value="fresh")]) == 1


def test_array_literals_carry_numbers_times_and_nulls_exactly():
    from datetime import UTC, datetime, timezone

    from django_outbox.db.rowvalues import array_literal

    assert array_literal([1, None, -3]) == "{1,NULL,-3}"
    for refused in (["1,2"], [True], [1.5]):
        with pytest.raises(TypeError, match="whole numbers and datetimes"):
            array_literal(refused)
    times = [
        datetime(2026, 12, 3, 13, 0, 0, 123456, tzinfo=UTC),
        None,
        datetime(1999, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
    ]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT %s::timestamptz[], %s::bigint[]",
            [array_literal(times), array_literal([2**40, None])],
        )
        stored_times, stored_ids = cursor.fetchone()
    assert stored_times == times and stored_ids == [2**40, None]


TRICKY_VALUES = [
    'a "quoted" word, a back\\slash, {braces} and a comma',
    "é ✓ \U0001f600 and a tab\t and a newline\n",
    None,  # the JSON null
    {"nested": ["x", 1, 2.5, True, None], "quote": '"', "backslash": "\\"},
    "NULL",
    "",
]


def test_per_job_json_and_text_reach_the_row_exactly(job_factory):
    """Per-job values go to PostgreSQL as one quoted array literal: quotes, backslashes,
    braces, commas and the word NULL must come back as they went in."""
    job_factory.create_batch(len(TRICKY_VALUES))
    claimed = claim("w1", ["default"], len(TRICKY_VALUES), 30)
    outcomes = [
        Outcome(job, succeeded=True, return_value=value)
        for job, value in zip(claimed, TRICKY_VALUES, strict=True)
    ]
    assert complete("w1", outcomes) == len(TRICKY_VALUES)
    stored = dict(
        Job.objects.filter(pk__in=[j.id for j in claimed]).values_list("id", "return_value")
    )
    assert [stored[j.id] for j in claimed] == TRICKY_VALUES
    if connection.vendor != "postgresql":
        return
    from django_outbox.db.rowvalues import NO_VALUE, postgres_array

    texts, _ = postgres_array(connection.alias, [*map(str, TRICKY_VALUES), None, NO_VALUE], "text")
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[]", [texts])
        assert cursor.fetchone()[0] == [*map(str, TRICKY_VALUES), None, None]


def test_a_held_back_first_run_is_queued_as_if_never_claimed(job_factory):
    """The attempt, its start and its worker id come off again (the start is read before
    the attempt changes: MariaDB and MySQL assign left to right)."""
    job_factory()
    (claimed,) = claim("w1", ["default"], 1, 30)
    later = timezone.now() + timedelta(seconds=30)
    outcome = Outcome(claimed, succeeded=False, held_until=later, new_kwargs={"turn": 2})
    assert complete("w1", [outcome]) == 1
    row = Job.objects.get(pk=claimed.id)
    assert (row.status, row.attempts, row.started_at, row.worker_ids) == (
        JobStatus.QUEUED,
        0,
        None,
        [],
    )
    assert row.run_at == later and row.kwargs == {"turn": 2} and row.worker_id is None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN output is PostgreSQL's")
def test_the_completion_finds_its_rows_by_id_whatever_the_statistics_say():
    """Statistics taken while nothing ran (one running row, say) must not pick the plan:
    not the lease index (a bitmap scan of it reads every dead entry a drain left), not a
    loop over the batch for each running row."""

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_job")  # the table empty: stale from here on
    Job.objects.bulk_create([Job(task_path="tests.tasks.noop") for _ in range(3000)])
    claimed = claim("w1", ["default"], 500, 30)
    with CaptureQueriesContext(connection) as queries:
        complete("w1", [Outcome(job, succeeded=True) for job in claimed])
    assert names(queries) == ["complete-succeeded"]
    (sql,) = [q["sql"] for q in queries.captured_queries]
    plan = plan_of(sql)
    assert "outbox_job_lease" not in plan, plan
    # By primary key, or, on a table small enough for it to cost less, one scan of it.
    assert "django_outbox_job_pkey" in plan or "Seq Scan on django_outbox_job" in plan, plan
    assert "Nested Loop" not in plan, plan
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 500
