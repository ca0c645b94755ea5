"""MariaDB and MySQL: what only they do (the rest of the suite runs on them unchanged).

MySQL's own code paths (no ``INSERT … RETURNING``) run on the tests' MariaDB server with
``OUTBOX_TEST_DIALECT=mysql`` (tests/apps.py); ``scripts/test.sh`` runs the tests that
insert that way so.
"""

from __future__ import annotations

import itertools

import pytest
from django.core import checks
from django.db import connection

from django_outbox import checks as outbox_checks
from django_outbox.db import dialect
from django_outbox.db.inserts import insert_rows
from django_outbox.db.mysql import MySQL
from django_outbox.models import Job
from tests.factories import JobFactory

pytestmark = pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's and MySQL's own")


@pytest.mark.django_db
def test_mysqls_inserted_ids_follow_the_servers_increment(monkeypatch):
    """A multi-row INSERT's ids, read from the first: right even where the server hands out
    every third number (a multi-primary cluster's auto_increment_increment)."""
    from django_outbox import db

    monkeypatch.setitem(db._DIALECTS, "mariadb", MySQL())
    fields = [field for field in Job._meta.concrete_fields if not field.primary_key]
    names = [field.name for field in fields]
    jobs = [JobFactory.build(task_path=f"tests.tasks.n{n}") for n in range(5)]
    rows = [[getattr(job, field.attname) for field in fields] for job in jobs]
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION auto_increment_increment = 3")
    try:
        ids = insert_rows("enqueue", Job, names, rows)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION auto_increment_increment = 1")
    assert isinstance(dialect("default"), MySQL)
    stored = dict(Job.objects.values_list("pk", "task_path"))
    assert [stored[pk] for pk in ids] == [f"tests.tasks.n{n}" for n in range(5)]
    assert [b - a for a, b in itertools.pairwise(ids)] == [3, 3, 3, 3]


def test_an_isolation_level_other_than_read_committed_is_warned_about():
    good = {"ENGINE": "django.db.backends.mysql", "OPTIONS": {"isolation_level": "read committed"}}
    assert outbox_checks.mysql_checks("default", good) == []
    assert outbox_checks.mysql_checks("default", {"ENGINE": "django.db.backends.mysql"}) == []
    for level in ("repeatable read", None):
        database = {"ENGINE": "django.db.backends.mysql", "OPTIONS": {"isolation_level": level}}
        (warning,) = outbox_checks.mysql_checks("default", database)
        assert warning.id == "django_outbox.W005" and warning.level == checks.WARNING
        assert "not READ COMMITTED" in warning.msg and "read committed" in warning.hint


@pytest.mark.django_db
def test_a_server_that_would_cut_values_silently_is_warned_about():
    assert outbox_checks.mysql_checks("default", query=True) == []  # the tests' server: strict
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.sql_mode")
        mode = cursor.fetchone()[0]
        cursor.execute("SET SESSION sql_mode = ''")
    try:
        (warning,) = outbox_checks.mysql_checks("default", query=True)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION sql_mode = %s", [mode])
    assert warning.id == "django_outbox.W006"
    assert "cut short" in warning.msg and "STRICT_TRANS_TABLES" in warning.hint


@pytest.mark.django_db
def test_without_redis_a_check_says_idle_workers_will_poll_and_why(settings):
    assert [m for m in outbox_checks.check_wake() if m.id == "django_outbox.W004"] == []
    settings.CACHES = {"default": settings.CACHES["default"]}
    (warning,) = [m for m in outbox_checks.check_wake() if m.id == "django_outbox.W004"]
    assert "no LISTEN/NOTIFY" in warning.msg and "CACHES['redis']" in warning.msg
    settings.OUTBOX = settings.OUTBOX | {"WAKE": "poll"}  # polling, said aloud
    assert [m for m in outbox_checks.check_wake() if m.id == "django_outbox.W004"] == []


def test_the_workers_start_line_says_which_wake_up_and_why(run_worker, settings, caplog):
    caplog.set_level("INFO", logger="django_outbox.worker")
    run_worker()
    assert (
        "wake-ups: redis (WAKE='auto': database 'default' has no LISTEN/NOTIFY, "
        "CACHES['redis'] is django-redis)" in caplog.text
    )
    caplog.clear()
    settings.CACHES = {"default": settings.CACHES["default"]}
    run_worker()
    assert (
        "wake-ups: poll (WAKE='auto': database 'default' has no LISTEN/NOTIFY, "
        "no django-redis cache CACHES['redis'])" in caplog.text
    )


@pytest.mark.django_db(transaction=True)
def test_a_transaction_undone_for_a_deadlock_runs_again_at_once(caplog):
    """InnoDB breaks a deadlock by undoing one transaction (error 1213): the worker runs
    the operation again, without the pause and the warning of a database that is away."""
    import threading

    from django.db import connections, transaction

    from django_outbox.worker.database import Database
    from django_outbox.worker.loop import WorkerStats

    first, second = JobFactory(), JobFactory()
    holds_second = threading.Event()
    first_locked = threading.Event()

    def other_transaction() -> None:
        # Writes the second row first: the operation, which has written nothing, is the
        # cheaper one to undo.
        with transaction.atomic():
            Job.objects.filter(pk=second.pk).update(priority=5)
            holds_second.set()
            first_locked.wait(10)
            Job.objects.filter(pk=first.pk).update(priority=5)
        connections.close_all()

    runs = []

    def operation() -> str:
        runs.append(1)
        with transaction.atomic():
            list(Job.objects.select_for_update().filter(pk=first.pk))
            if len(runs) == 1:
                first_locked.set()
            list(Job.objects.select_for_update().filter(pk=second.pk))
        return "done"

    other = threading.Thread(target=other_transaction)
    other.start()
    assert holds_second.wait(10)
    database = Database("w1", "default", 30, WorkerStats())
    try:
        with caplog.at_level("WARNING", logger="django_outbox.worker"):
            assert database.run(operation) == "done"
    finally:
        first_locked.set()
        other.join()
    assert len(runs) == 2 and database.failures == 0
    assert "database error" not in caplog.text


@pytest.mark.django_db
def test_djangos_warnings_about_what_migration_0010_stands_in_for_are_not_shown():
    from django.contrib.auth.models import User

    shown = {m.id for m in checks.run_checks(databases=["default"]) if m.id.startswith("models.")}
    assert shown.isdisjoint(outbox_checks.STOOD_IN_FOR)
    # The same warning about another app's model still shows.
    theirs = checks.Warning("no partial indexes", obj=User, id="models.W037")
    ours = checks.Warning("no partial indexes", obj=Job, id="models.W037")
    assert not outbox_checks._is_stood_in_for(theirs) and outbox_checks._is_stood_in_for(ours)
