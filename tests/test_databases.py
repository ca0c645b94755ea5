"""Past one primary: a TASKS alias that keeps its jobs in a database of its own
(``OPTIONS["DATABASE"]``, docs/deployment.md).

tests/settings.py gives TASKS["elsewhere"] a second database of the run's own family
("jobs2"), and, in the PostgreSQL run, TASKS["other_family"] a MariaDB database
("other_family", from OUTBOX_TEST_OTHER_URL).
"""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.core import checks
from django.db import connections, transaction
from django.test import override_settings

from django_outbox import webhooks
from django_outbox.compat import TaskResultStatus, task_backends
from django_outbox.models import Job, Message, ScheduleState
from tests import tasks
from tests.conftest import wait_until

BOTH = ["default", "jobs2"]


def jobs_in(database: str) -> list[tuple[str, list]]:
    return list(Job.objects.using(database).values_list("backend", "args"))


@pytest.mark.django_db(databases=BOTH)
def test_an_alias_with_a_database_of_its_own_keeps_its_jobs_there():
    there = tasks.add.using(backend="elsewhere").enqueue(1, 2)
    here = tasks.add.enqueue(3, 4)
    assert jobs_in("jobs2") == [("elsewhere", [1, 2])]
    assert jobs_in("default") == [("default", [3, 4])]
    # Each result is found in its own alias's database.
    assert task_backends["elsewhere"].get_result(there.id).args == [1, 2]
    assert task_backends["default"].get_result(here.id).args == [3, 4]
    there.refresh()
    assert there.status == TaskResultStatus.READY


@pytest.mark.django_db(databases=BOTH)
def test_a_rollback_of_the_aliases_database_leaves_nothing_behind():
    with pytest.raises(RuntimeError), transaction.atomic(using="jobs2"):
        tasks.add.using(backend="elsewhere").enqueue(1, 2)
        raise RuntimeError("the view failed")
    assert jobs_in("jobs2") == []


@pytest.mark.django_db(databases=BOTH)
def test_a_rollback_of_another_database_does_not_take_the_job_with_it():
    """What docs/deployment.md warns about: the enqueue is transactional with the data
    of its own database only."""
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        tasks.add.using(backend="elsewhere").enqueue(1, 2)
        raise RuntimeError("the view failed")
    assert jobs_in("jobs2") == [("elsewhere", [1, 2])]


@pytest.mark.django_db(databases=BOTH)
def test_webhooks_live_in_the_database_of_their_alias(settings):
    settings.TASKS = settings.TASKS | {
        "elsewhere": settings.TASKS["elsewhere"] | {"QUEUES": ["default", "webhooks"]}
    }
    settings.OUTBOX = settings.OUTBOX | {
        "WEBHOOKS": settings.OUTBOX["WEBHOOKS"] | {"BACKEND": "elsewhere"}
    }
    webhooks.create_endpoint("http://127.0.0.1:9/hook")
    webhooks.send("order.paid", {"id": 1})
    assert Message.objects.using("jobs2").count() == 1
    assert Message.objects.using("default").count() == 0
    assert [backend for backend, _args in jobs_in("jobs2")] == ["elsewhere"]


@pytest.mark.django_db(databases=BOTH)
def test_a_schedule_ticks_in_the_database_of_its_tasks_alias(settings):
    from django_outbox import schedules

    settings.OUTBOX = settings.OUTBOX | {
        "SCHEDULES": {"often": {"task": "tests.tasks_elsewhere.noop", "cron": "* * * * *"}}
    }
    schedules.enqueue_due()
    assert ScheduleState.objects.using("jobs2").filter(name="often").exists()
    assert not ScheduleState.objects.using("default").exists()


@pytest.mark.django_db
def test_a_database_an_alias_names_must_exist_and_be_routed(settings):
    def errors() -> list[str]:
        found = checks.run_checks(databases=["default"])
        return [m.msg for m in found if m.id == "django_outbox.E009"]

    assert errors() == []
    settings.TASKS = settings.TASKS | {
        "elsewhere": settings.TASKS["elsewhere"] | {"OPTIONS": {"DATABASE": "nowhere"}}
    }
    (missing,) = errors()
    assert "'nowhere', which is not in DATABASES" in missing
    settings.TASKS = settings.TASKS | {
        "elsewhere": settings.TASKS["elsewhere"] | {"OPTIONS": {"DATABASE": ["jobs2"]}}
    }
    (not_a_name,) = errors()
    assert "must be the name of one of DATABASES, not ['jobs2']" in not_a_name
    settings.TASKS = settings.TASKS | {
        "elsewhere": settings.TASKS["elsewhere"] | {"OPTIONS": {"DATABASE": "jobs2"}}
    }
    settings.DATABASE_ROUTERS = []
    (unrouted,) = errors()
    assert "DATABASE_ROUTERS lacks 'django_outbox.routers.JobsRouter'" in unrouted


def _each_worker_claims_only_its_own_database(start_worker, alias: str, database: str) -> None:
    here = tasks.add.enqueue(1, 2)
    there = tasks.add.using(backend=alias).enqueue(3, 4)
    more = {"OUTBOX_TEST_MORE_DATABASES": "1"}
    worker = start_worker("--backend", alias, "--burst", extra_env=more)
    assert worker.wait() == 0, worker.log()
    assert task_backends[alias].get_result(there.id).status == TaskResultStatus.SUCCESSFUL
    assert task_backends["default"].get_result(here.id).status == TaskResultStatus.READY
    assert f"database {database} (" in worker.log()
    default_worker = start_worker("--burst", extra_env=more)
    assert default_worker.wait() == 0, default_worker.log()
    wait_until(
        lambda: task_backends["default"].get_result(here.id).status == TaskResultStatus.SUCCESSFUL,
        what="the default alias's job to run",
    )


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_a_worker_of_an_alias_claims_only_its_own_database(start_worker):
    _each_worker_claims_only_its_own_database(start_worker, "elsewhere", "jobs2")


#: Two families at once: the PostgreSQL run has MariaDB beside it (scripts/test.sh).
OTHER_FAMILY = "other_family" in settings.DATABASES


@pytest.mark.e2e
@pytest.mark.skipif(
    not OTHER_FAMILY
    and not (
        os.environ.get("OUTBOX_REQUIRE_SERVICES") == "1"
        and os.environ.get("DATABASE_URL", "").startswith("postgres")
    ),
    reason="two families: the PostgreSQL run, with OUTBOX_TEST_OTHER_URL (a MariaDB database)",
)
@pytest.mark.django_db(
    transaction=True, databases=["default", "other_family"] if OTHER_FAMILY else ["default"]
)
def test_postgresql_beside_mariadb_each_alias_in_its_own(start_worker):
    # CI's PostgreSQL run must have it.
    assert OTHER_FAMILY, "the PostgreSQL run needs OUTBOX_TEST_OTHER_URL (a MariaDB database)"
    assert connections["default"].vendor != connections["other_family"].vendor
    _each_worker_claims_only_its_own_database(start_worker, "other_family", "other_family")


@override_settings(DATABASE_ROUTERS=["django_outbox.routers.JobsRouter"])
def test_the_router_leaves_other_models_and_unnamed_aliases_alone():
    from django.contrib.auth.models import User

    from django_outbox.db.routing import JobsRouter, jobs_of

    router = JobsRouter()
    assert router.db_for_write(Job) is None  # the routers after it decide
    with jobs_of("elsewhere"):
        assert router.db_for_write(Job) == "jobs2"
        assert router.db_for_read(User) is None
        with jobs_of("default"):  # an alias without a database: the router's choice
            assert router.db_for_write(Job) is None
    assert router.allow_migrate("jobs2", "django_outbox") is True
    assert router.allow_migrate("jobs2", "auth") is None
