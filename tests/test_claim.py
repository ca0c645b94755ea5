import re
import threading
import time
from datetime import timedelta

import factory
import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.jobs.claim import claim
from django_outbox.models import Job, JobStatus
from tests.layout import one_table_only
from tests.statements import names, one_claim, plan_of

pytestmark = pytest.mark.django_db


def test_claims_due_jobs_in_priority_then_time_then_id_order(job_factory):
    now = timezone.now()
    late_low = job_factory(priority=0, run_at=now - timedelta(seconds=1))
    early_low = job_factory(priority=0, run_at=now - timedelta(seconds=5))
    high = job_factory(priority=10, run_at=now - timedelta(seconds=1))
    job_factory(priority=100, run_at=now + timedelta(hours=1))  # not due yet
    job_factory(priority=100, queue="emails")  # another queue
    claimed = claim("w1", ["default"], 10, 30)
    assert [job.id for job in claimed] == [high.pk, early_low.pk, late_low.pk]


def test_a_claim_leases_the_jobs_in_one_statement(job_factory):
    job_factory.create_batch(5)
    with CaptureQueriesContext(connection) as queries:
        claimed = claim("w1", ["default"], 3, 30)
    assert names(queries) == one_claim()
    assert len(claimed) == 3
    rows = Job.objects.filter(status=JobStatus.RUNNING)
    assert rows.count() == 3
    for job in rows:
        assert job.worker_id == "w1"
        assert job.attempts == 1 and job.worker_ids == ["w1"]
        assert timedelta(seconds=25) < job.lease_until - timezone.now() <= timedelta(seconds=30)
        assert job.started_at is not None
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 2


def test_a_second_attempt_keeps_its_first_start_and_adds_the_worker(job_factory):
    first_start = timezone.now() - timedelta(minutes=5)
    job_factory(attempts=1, worker_ids=["w0"], started_at=first_start)
    (claimed,) = claim("w1", ["default"], 1, 30)
    assert claimed.attempts == 2 and claimed.worker_ids == ["w0", "w1"]
    assert claimed.started_at == first_start


def test_nothing_due_claims_nothing(job_factory):
    job_factory(run_at=timezone.now() + timedelta(minutes=1))
    job_factory(status=JobStatus.SUCCEEDED)
    assert claim("w1", ["default"], 10, 30) == []
    assert claim("w1", [], 10, 30) == []


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite has no row locks")
@pytest.mark.django_db(transaction=True)
def test_a_claim_of_several_queues_locks_only_the_jobs_it_takes(job_factory):
    """Two workers claiming the same queues at once each get jobs: a claim holds the rows
    it took until it commits, and no others (a sorted locking read on MariaDB once locked
    every due row it read, leaving the other worker nothing)."""
    # Enough rows for MariaDB to sort them rather than read an index in order.
    jobs = job_factory.create_batch(300, queue=factory.Iterator(["default", "emails", "reports"]))
    jobs = [job for job in jobs if job.queue != "reports"]
    took = threading.Event()
    release = threading.Event()
    first: list[int] = []

    def claim_and_hold():
        with transaction.atomic():  # the claim's locks last until this commits
            first.extend(job.id for job in claim("w1", ["default", "emails"], 3, 30))
            took.set()
            release.wait(10)
        connections.close_all()

    holder = threading.Thread(target=claim_and_hold)
    holder.start()
    try:
        assert took.wait(10)
        second = [job.id for job in claim("w2", ["default", "emails"], 5, 30)]
    finally:
        release.set()
        holder.join()
    assert first == [job.pk for job in jobs[:3]]
    assert second == [job.pk for job in jobs[3:8]]


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite has no row locks")
@pytest.mark.django_db(transaction=True)
def test_rows_locked_by_another_transaction_are_skipped_not_waited_for(job_factory):
    first, second = job_factory.create_batch(2)
    locked = threading.Event()
    release = threading.Event()

    def hold_lock():
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=first.pk)
            locked.set()
            release.wait(10)
        connections.close_all()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(10)
        claimed = claim("w1", ["default"], 10, 30)
        assert [job.id for job in claimed] == [second.pk]
    finally:
        release.set()
        holder.join()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN output is PostgreSQL's")
def test_the_claim_reads_the_partial_claim_index(job_factory):
    Job.objects.bulk_create(
        [Job(task_path="tests.tasks.noop", status=JobStatus.SUCCEEDED) for _ in range(5000)]
        + [Job(task_path="tests.tasks.noop") for _ in range(50)]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_job")
    with CaptureQueriesContext(connection) as queries:
        claim("w1", ["default"], 10, 30)
    assert names(queries) == ["claim"]
    (claim_sql,) = [q["sql"] for q in queries.captured_queries]
    plan = plan_of(claim_sql)
    assert "outbox_job_claim" in plan, plan


def test_only_the_workers_backend_alias_is_claimed(job_factory):
    job_factory(backend="other")
    mine = job_factory()
    assert [job.id for job in claim("w1", ["default"], 10, 30)] == [mine.pk]
    assert len(claim("w2", ["default"], 10, 30, backend="other")) == 1


@one_table_only
@pytest.mark.skipif(connection.vendor != "postgresql", reason="fillfactor is PostgreSQL's")
@pytest.mark.django_db(transaction=True)  # committed, as a worker's: old versions can go
def test_claimed_and_finished_versions_stay_on_their_page():
    """The job table leaves room on each page (migration 0006), so a job's later versions
    are written beside it: the WAL then holds only what changed, not another whole row."""
    import django_outbox
    from django_outbox.jobs.complete import Outcome, complete
    from tests import tasks

    def pages():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, (ctid::text::point)[0] FROM {Job._meta.db_table}")
            return dict(cursor.fetchall())

    def moved_since(enqueued):
        now = pages()
        return sum(now[pk] != page for pk, page in enqueued.items())

    # A page's old versions are pruned only when no transaction can still see them. One of
    # this database that holds a snapshot keeps them; so, for the versions this drain writes,
    # does any transaction of the cluster with an xid open across it (another test run's, in
    # its own database): every snapshot taken here then has the same xmin, and PostgreSQL
    # does not look at the horizon again. Such a drain proves only what the room holds
    # without pruning: a claim's new versions, a third of a page's rows (at fillfactor 100,
    # all of them move). A drain beside no such transaction must keep every row in place.
    clean_drains = 0
    patience = time.monotonic() + 10  # for other databases' transactions, all drains together
    for _ in range(5):
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {Job._meta.db_table}")
        _wait_until_no_other_transaction_holds_old_versions(patience=patience)
        django_outbox.enqueue_many(tasks.noop, [((), {})] * 400)
        enqueued = pages()
        assert len(set(enqueued.values())) > 2  # the rows fill several pages
        holders = []
        claimed = []
        while batch := claim("w1", ["default"], 50, 30):
            holders += _horizon_holders(cluster=True)
            claimed += batch
        # At fillfactor 60 a claim of whole pages with nothing pruned moved 4 rows in 10.
        assert moved_since(enqueued) <= len(enqueued) / 2
        for start in range(0, len(claimed), 50):
            batch = claimed[start : start + 50]
            assert complete("w1", [Outcome(job, succeeded=True) for job in batch]) == len(batch)
            holders += _horizon_holders(cluster=True)
        if not holders:
            clean_drains += 1
            assert moved_since(enqueued) <= len(enqueued) / 50
    # On a cluster busy with other work every drain may have run beside one: then only the
    # claims' bound was asserted, five times.
    print(f"{clean_drains} of 5 drains ran with nothing holding old versions")


def _wait_until_no_other_transaction_holds_old_versions(
    timeout: float = 60.0, patience: float | None = None
) -> None:
    """An autovacuum ANALYZE of this database, or a worker process an earlier test started
    and that is still stopping, holds old versions while it runs: wait for it to end. Until
    the monotonic time `patience`, wait also for other databases' transactions with an xid;
    a busy cluster may have one all the time, so that wait ends then without failing."""
    deadline = time.monotonic() + timeout
    cluster = patience is not None
    while holders := _horizon_holders(cluster):
        if patience is not None and not _horizon_holders():
            if time.monotonic() > patience:
                return
        else:
            assert time.monotonic() < deadline, f"still holding old row versions: {holders}"
        time.sleep(0.05)


def _horizon_holders(cluster: bool = False) -> list[tuple]:
    """Other sessions of this database whose transaction keeps old row versions; with
    `cluster`, also those of any database with an xid, which keep every snapshot's xmin."""
    anywhere = " OR backend_xid IS NOT NULL" if cluster else ""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, datname, application_name, state, backend_xid, backend_xmin, query"
            " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            " AND ((datname = current_database()"
            f" AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)){anywhere})"
        )
        return cursor.fetchall()


def _set_columns(sql: str) -> set[str]:
    """The columns an UPDATE statement assigns."""
    assignments = sql[sql.index(" SET ") + 5 : sql.index(" WHERE ")]
    return set(re.findall(r'(?:^|, )"?(\w+)"? = ', assignments))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the WAL is PostgreSQL's")
def test_the_columns_a_claim_or_a_completion_writes_sit_together(job_factory):
    """PostgreSQL logs an UPDATE kept on its page as the bytes between the unchanged
    prefix and suffix of the row: the columns each statement writes must be neighbours in
    the table (migration 0001's order), or the WAL holds the unchanged ones between them."""
    from django_outbox.jobs.complete import Outcome, complete

    job_factory.create_batch(2)
    with CaptureQueriesContext(connection) as queries:
        claimed = claim("w1", ["default"], 2, 30)
        complete("w1", [Outcome(job, succeeded=True, return_value=1) for job in claimed])
    assert names(queries) == ["claim", "complete-succeeded"]
    claim_sql, complete_sql = (q["sql"] for q in queries.captured_queries)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [Job._meta.db_table],
        )
        table = [name for (name,) in cursor.fetchall()]
    for written in (_set_columns(claim_sql), _set_columns(complete_sql)):
        assert len(written) >= 4
        places = sorted(table.index(name) for name in written)
        between = table[places[0] : places[-1] + 1]
        assert set(between) == written, f"{set(between) - written} sit among {written}"


@pytest.mark.parametrize("worker_id", ["w1", 'w"1', "w\\1", "wé", "w\n1"])
def test_claimed_rows_decode_their_json_as_the_orm_does(job_factory, worker_id):
    shapes = [[], {}, ["a"], ["a", "b"], ['a"b'], ["a\\b"], ["é"], [1], [[]], ["[]"], [{}]]
    made = {job_factory(args=shape, kwargs={"k": shape}).pk: shape for shape in shapes}
    job_factory(args=[], kwargs={}, worker_ids=["earlier"])
    claimed = claim(worker_id, ["default"], 100, 30)
    assert len(claimed) == len(made) + 1
    for job in claimed:
        stored = Job.objects.get(pk=job.id)
        assert (job.args, job.kwargs, job.worker_ids, job.errors) == (
            stored.args,
            stored.kwargs,
            stored.worker_ids,
            stored.errors,
        )
        assert job.worker_ids[-1] == worker_id
        if job.id in made:
            assert job.args == made[job.id] and job.kwargs == {"k": made[job.id]}
