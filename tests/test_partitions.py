"""The job table partitioned by status and by day (``OUTBOX["RETENTION"]["PARTITIONS"]``,
``manage.py outbox_partition``): what the conversion keeps, what a prune drops and what it
keeps, the days made ahead, a worker on it, and the checks that say what is wrong.

Most of these run in the test's own transaction: PostgreSQL's DDL is transactional, so the
conversion goes when the test's transaction is rolled back. The whole suite also runs on a
partitioned table (OUTBOX_TEST_PARTITIONED=1, tests/conftest.py)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.utils import timezone

from django_outbox import checks, retention
from django_outbox.db import partitions
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Job, JobStatus, LimitKey
from tests import tasks
from tests.conftest import wait_until
from tests.layout import PARTITIONED

TABLE = Job._meta.db_table
on_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="only PostgreSQL partitions the job table"
)


def forget_the_layout() -> None:
    """A process learns once whether its job table is partitioned (a project converts it
    with the workers stopped): these tests convert it in the middle of one, so they make
    it learn again."""
    partitions.jobs_partitioned.cache_clear()


@pytest.fixture
def partitioning(settings) -> Iterator[None]:
    """OUTBOX["RETENTION"]["PARTITIONS"] on, keeping 14 days; the conversions a test makes
    go with its transaction."""
    settings.OUTBOX = settings.OUTBOX | {"RETENTION": {"OLDER_THAN": "14d", "PARTITIONS": True}}
    forget_the_layout()
    yield
    forget_the_layout()


def command(*args: str) -> str:
    out = StringIO()
    call_command("outbox_partition", *args, stdout=out)
    return out.getvalue()


def finished(days_ago: float, status: str = JobStatus.SUCCEEDED, **fields) -> Job:
    return Job.objects.create(
        task_path="tests.tasks.add",
        status=status,
        finished_at=timezone.now() - timedelta(days=days_ago),
        **fields,
    )


def partition_of(job: Job) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {TABLE} WHERE id = %s", [job.pk])
        return str(cursor.fetchone()[0])


def day_name(days_ago: float) -> str:
    day = (timezone.now() - timedelta(days=days_ago)).astimezone(UTC).date()
    return f"{TABLE}_d{day:%Y%m%d}"


def exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return bool(cursor.fetchone()[0])


def indexes() -> dict[str, str]:
    """The job table's indexes by name, each as its definition, and its storage options."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
            "UNION ALL SELECT 'options', coalesce(array_to_string(reloptions, ','), '') "
            "FROM pg_class WHERE oid = %s::regclass",
            [TABLE, TABLE],
        )
        return {name: _without_casts(text) for name, text in cursor.fetchall()}


def _without_casts(definition: str) -> str:
    """A definition as PostgreSQL prints it, without the casts and brackets its printing of
    the same predicate varies in (a list of statuses is cast per item or as a whole)."""
    casts = r"::(character varying|text|bigint|integer|timestamp with time zone)(\[\])?"
    return re.sub(r"[()]", "", re.sub(casts, "", definition))


def unpartitioned() -> None:
    """Start from one table, also in a suite run on a partitioned one."""
    if partitions.is_partitioned(connection, TABLE):
        partitions.unpartition(connection, TABLE)


@on_postgres
@pytest.mark.django_db
def test_the_command_partitions_the_table_with_its_rows_and_undo_makes_it_one_again(
    partitioning,
):
    unpartitioned()
    before = indexes()
    queued = Job.objects.create(task_path="tests.tasks.add")
    today = finished(0)
    three_days = finished(3)
    long_ago = finished(40, JobStatus.FAILED)

    output = command()

    assert f"{TABLE} is partitioned, with its 4 jobs." in output
    assert partitions.is_partitioned(connection, TABLE)
    assert partition_of(queued) == f"{TABLE}_active"
    assert partition_of(today) == day_name(0)
    assert partition_of(three_days) == day_name(3)
    # Older than the retention window (14 days): the default partition, pruned in chunks.
    assert partition_of(long_ago) == f"{TABLE}_fdefault"
    assert exists(day_name(-partitions.DAYS_AHEAD))
    assert Job.objects.create(task_path="tests.tasks.add").pk > long_ago.pk
    assert "partitioned already" in command()

    output = command("--undo")

    assert f"{TABLE} is one table again, with its 5 jobs." in output
    assert not partitions.is_partitioned(connection, TABLE)
    assert indexes() == before
    assert "fillfactor" in before["options"]
    jobs = {queued.pk, today.pk, three_days.pk, long_ago.pk}
    assert len(set(Job.objects.values_list("pk", flat=True)) - jobs) == 1
    assert "nothing to undo" in command("--undo")


@on_postgres
@pytest.mark.django_db
def test_the_command_refuses_without_the_setting_and_leaves_the_table(settings):
    unpartitioned()
    settings.OUTBOX = settings.OUTBOX | {"RETENTION": {"OLDER_THAN": "7d"}}
    with pytest.raises(CommandError, match=r"Set OUTBOX\['RETENTION'\]\['PARTITIONS'\] = True"):
        command()
    assert not partitions.is_partitioned(connection, TABLE)


@pytest.mark.skipif(connection.vendor == "postgresql", reason="PostgreSQL can partition")
@pytest.mark.django_db
def test_other_databases_are_told_only_postgresql_partitions(partitioning):
    with pytest.raises(CommandError, match="on PostgreSQL only"):
        command()
    (error,) = checks.partition_checks(connection.alias)
    assert error.id == "django_outbox.E012"
    assert "not PostgreSQL" in error.msg


@on_postgres
@pytest.mark.django_db
def test_a_prune_drops_past_days_and_keeps_what_must_stay(partitioning):
    unpartitioned()
    gone_day = [finished(10) for _ in range(3)]
    step_day = [finished(11), finished(11, workflow_id=123456)]
    holder = finished(12, JobStatus.FAILED)
    LimitKey.objects.create(key="sequence:order-1", held_by=holder.pk, updated_at=timezone.now())
    recent = finished(2)
    command()
    assert exists(day_name(10))

    pruned = retention.prune(timedelta(days=7))

    # A day that keeps nothing goes whole; the others keep their partition, and their rows
    # that may go are deleted.
    assert not exists(day_name(10))
    assert not Job.objects.filter(pk__in=[j.pk for j in gone_day]).exists()
    assert exists(day_name(11)) and exists(day_name(12))
    assert set(Job.objects.values_list("pk", flat=True)) == {step_day[1].pk, holder.pk, recent.pk}
    assert pruned.counts["jobs"] == 4


@on_postgres
@pytest.mark.django_db
def test_a_job_goes_with_its_day_once_all_of_the_day_is_past_the_age(partitioning):
    unpartitioned()
    now = timezone.now()
    cutoff = now - timedelta(days=7)
    midnight = partitions.day_start(cutoff)
    # Older than the age, but its day is not over before the cutoff: it waits for its day.
    waits = Job.objects.create(
        task_path="tests.tasks.add",
        status=JobStatus.SUCCEEDED,
        finished_at=midnight + (cutoff - midnight) / 2,
    )
    day_before = Job.objects.create(
        task_path="tests.tasks.add",
        status=JobStatus.SUCCEEDED,
        finished_at=midnight - timedelta(hours=1),
    )
    command()
    assert "1 job" in prune_output("--older-than", "7d", "--dry-run")

    retention.prune(timedelta(days=7), now=now)

    assert list(Job.objects.values_list("pk", flat=True)) == [waits.pk]
    assert not exists(partition_of_day(midnight - timedelta(hours=1)))
    assert exists(partition_of_day(midnight))

    retention.prune(timedelta(days=7), now=midnight + timedelta(days=8))
    assert not Job.objects.filter(pk__in=[waits.pk, day_before.pk]).exists()
    assert not exists(partition_of_day(midnight))


def partition_of_day(moment: datetime) -> str:
    return f"{TABLE}_d{moment.astimezone(UTC):%Y%m%d}"


def prune_output(*args: str) -> str:
    out = StringIO()
    call_command("outbox_prune", *args, stdout=out)
    return out.getvalue()


@on_postgres
@pytest.mark.django_db
def test_a_prune_of_some_statuses_leaves_a_day_with_others_in_place(partitioning):
    unpartitioned()
    succeeded, failed = finished(10), finished(10, JobStatus.FAILED)
    command()

    retention.prune(timedelta(days=7), statuses=["succeeded"])

    assert exists(day_name(10))
    assert list(Job.objects.values_list("pk", flat=True)) == [failed.pk]
    assert not Job.objects.filter(pk=succeeded.pk).exists()


@on_postgres
@pytest.mark.django_db
def test_a_day_detached_by_a_prune_that_stopped_is_dropped_by_the_next(partitioning):
    unpartitioned()
    finished(10)
    command()
    (day,) = [d for d in partitions.days(connection, TABLE) if d.name == day_name(10)]
    assert partitions.detach(connection, TABLE, day)
    assert Job.objects.count() == 0  # a detached day is no part of the table

    pruned = retention.prune(timedelta(days=7))

    assert not exists(day.name)
    assert pruned.counts["jobs"] == 1


@on_postgres
@pytest.mark.django_db
def test_days_ahead_are_made_except_one_whose_rows_went_to_the_default(partitioning):
    unpartitioned()
    command()
    today = datetime.now(UTC).date()
    later = today + timedelta(days=20)
    # A job finished on a day without a partition lands in the default one ...
    early = Job.objects.create(
        task_path="tests.tasks.add",
        status=JobStatus.SUCCEEDED,
        finished_at=datetime.combine(later, datetime.min.time(), tzinfo=UTC) + timedelta(hours=1),
    )
    assert partition_of(early) == f"{TABLE}_fdefault"

    made = partitions.make_days(connection, TABLE, today=later)

    # ... and that day gets none (its rows would not fit), the days after it do.
    names = [f"{TABLE}_d{later + timedelta(days=n):%Y%m%d}" for n in range(1, 4)]
    assert made == names
    assert not exists(f"{TABLE}_d{later:%Y%m%d}")
    assert partitions.make_days(connection, TABLE, today=later) == []


@on_postgres
@pytest.mark.django_db
def test_unique_jobs_stay_unique_and_counts_are_estimated_over_the_partitions(partitioning):
    unpartitioned()
    command()
    first = tasks.add.using(unique_key="sum-1").enqueue(1, 2)
    second = tasks.add.using(unique_key="sum-1").enqueue(3, 4)
    assert second.id == first.id
    assert Job.objects.filter(dedup_key__isnull=False).count() == 1

    Job.objects.bulk_create(
        [Job(task_path="tests.tasks.noop", status=JobStatus.QUEUED) for _ in range(300)]
        + [
            Job(
                task_path="tests.tasks.noop", status=JobStatus.SUCCEEDED, finished_at=timezone.now()
            )
            for _ in range(200)
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TABLE}")
        cursor.execute(partitions.row_estimate_sql(), [TABLE])
        assert cursor.fetchone()[0] == 501


@pytest.fixture
def committed_partitioning(transactional_db, settings) -> Iterator[None]:
    """A partitioned job table that workers' connections see (committed), one table again
    after the test (unless the whole suite runs on a partitioned one)."""
    settings.OUTBOX = settings.OUTBOX | {"RETENTION": {"OLDER_THAN": "7d", "PARTITIONS": True}}
    was_partitioned = partitions.is_partitioned(connection, TABLE)
    if not was_partitioned:
        command()
    forget_the_layout()
    yield
    if not was_partitioned:
        command("--undo")
    forget_the_layout()


@on_postgres
def test_a_worker_runs_jobs_on_a_partitioned_table_and_results_read_back(
    committed_partitioning, run_worker
):
    results = [tasks.add.enqueue(n, 1) for n in range(20)]
    failing = tasks.returns_object.enqueue()
    run_worker()
    for n, result in enumerate(results):
        result.refresh()
        assert result.return_value == n + 1
    failing.refresh()
    assert failing.status.name == "FAILED"
    rows = Job.objects.filter(pk__in=[parse_result_id(r.id)[0] for r in [*results, failing]])
    assert {partition_of(row) for row in rows} == {day_name(0)}


@on_postgres
def test_a_worker_that_runs_through_the_undo_claims_from_the_one_table_again(
    committed_partitioning, run_worker
):
    """A worker learns the layout once; the docs say to stop workers for the conversion.
    One that was not stopped for the undo finds its claim's partition gone, learns the
    layout again and claims on, instead of stopping with "cannot claim jobs"."""
    first = tasks.add.enqueue(1, 1)
    run_worker()  # its claim updates the active partition
    first.refresh()
    assert first.return_value == 2
    command("--undo")
    partitions.jobs_partitioned.cache_clear()
    assert partitions.jobs_partitioned("default") is False
    partitions.jobs_partitioned.cache_clear()
    # As another process would still believe: the table is partitioned.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partitions, "is_partitioned", lambda connection, table: True)
        assert partitions.jobs_partitioned("default") is True
    second = tasks.add.enqueue(2, 2)
    stats = run_worker()
    second.refresh()
    assert second.return_value == 4 and stats.succeeded == 1
    assert partitions.jobs_partitioned("default") is False
    command()  # partitioned again, as the fixture undoes it


@on_postgres
def test_a_worker_starting_makes_the_days_ahead(committed_partitioning):
    from django_outbox import conf
    from django_outbox.worker.pruner import Pruner

    ahead: date = datetime.now(UTC).date() + timedelta(days=partitions.DAYS_AHEAD)
    name = f"{TABLE}_d{ahead:%Y%m%d}"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP TABLE "{name}"')
    pruner = Pruner(conf.get().RETENTION, "w1")
    pruner.start()  # its thread makes them before its first wait
    try:
        deadline = time.monotonic() + 10
        while not exists(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert exists(name)
    finally:
        pruner.stop()


@on_postgres
@pytest.mark.django_db
def test_the_database_check_says_when_setting_and_table_disagree(settings):
    unpartitioned()
    settings.OUTBOX = settings.OUTBOX | {"RETENTION": {"OLDER_THAN": "7d", "PARTITIONS": True}}
    (warning,) = checks.partition_checks(connection.alias, query=True)
    assert warning.id == "django_outbox.W008"
    assert "python manage.py outbox_partition" in warning.hint
    command()
    assert checks.partition_checks(connection.alias, query=True) == []

    settings.OUTBOX = settings.OUTBOX | {"RETENTION": {"OLDER_THAN": "7d"}}
    (warning,) = checks.partition_checks(connection.alias, query=True)
    assert "is partitioned" in warning.msg
    assert "--undo" in warning.hint


@on_postgres
@pytest.mark.skipif(PARTITIONED, reason="the suite's table is partitioned for the session")
@pytest.mark.django_db
def test_a_table_referenced_by_a_foreign_key_is_left_as_it_was(partitioning):
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE outbox_test_ref (job_id bigint REFERENCES {TABLE} (id))")
    with pytest.raises(CommandError, match="foreign keys reference"):
        command()
    assert not partitions.is_partitioned(connection, TABLE)


@on_postgres
def test_a_cancel_meeting_the_completion_that_moves_its_row_finds_it_finished(
    committed_partitioning,
):
    from django_outbox.jobs.operations import cancel_job

    job = Job.objects.create(task_path="tests.tasks.add", status=JobStatus.RUNNING, worker_id="w1")
    moved, release = threading.Event(), threading.Event()
    said: list[str] = []

    def complete() -> None:
        # A completion, holding its transaction open: the row is in today's partition now.
        with transaction.atomic():
            Job.objects.filter(pk=job.pk).update(
                status=JobStatus.SUCCEEDED, finished_at=timezone.now()
            )
            moved.set()
            release.wait(10)
        connections.close_all()

    canceller_pid: list[int] = []

    def cancel() -> None:
        connection.ensure_connection()
        canceller_pid.append(connection.connection.info.backend_pid)
        said.append(cancel_job(job.pk))
        connections.close_all()

    completer = threading.Thread(target=complete)
    completer.start()
    assert moved.wait(10)
    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        wait_until(
            lambda: canceller_pid and waiting_on_a_lock(canceller_pid[0]),
            what="the cancel waiting for the completion",
        )
    finally:
        release.set()
        completer.join(10)
        canceller.join(10)
    assert said == ["succeeded"]
    assert Job.objects.get(pk=job.pk).cancel_requested_at is None


def waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            [pid],
        )
        return bool(cursor.fetchone()[0])


@on_postgres
@pytest.mark.django_db
def test_the_claim_updates_the_active_partition_by_primary_key_only(partitioning):
    from django.test.utils import CaptureQueriesContext

    from django_outbox.jobs.claim import claim
    from tests.statements import plan_of

    unpartitioned()
    command()
    forget_the_layout()
    Job.objects.bulk_create(
        [
            Job(
                task_path="tests.tasks.noop", status=JobStatus.SUCCEEDED, finished_at=timezone.now()
            )
            for _ in range(5000)
        ]
        + [Job(task_path="tests.tasks.noop") for _ in range(3000)]
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TABLE}")
    with CaptureQueriesContext(connection) as queries:
        assert len(claim("w1", ["default"], 10, 30)) == 10
    from django_outbox.db import statement_name

    (claim_sql,) = [
        q["sql"] for q in queries.captured_queries if statement_name(q["sql"]) == "claim"
    ]
    plan = plan_of(claim_sql)
    # Its rows stay in the active partition (queued to running): it updates that one, found
    # by primary key, and reads the queued ones through the claim index.
    assert f"Update on {TABLE}_active" in plan, plan
    assert f"{TABLE}_d20" not in plan and f"{TABLE}_fdefault" not in plan, plan
    assert f"{TABLE}_active_pkey" in plan and "outbox_job_claim_active" in plan, plan


@pytest.mark.django_db
def test_an_unknown_database_is_named(partitioning):
    with pytest.raises(CommandError, match="No database 'nope' in DATABASES"):
        command("--database", "nope")
