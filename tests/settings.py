"""Settings for the test suite: the demo project's, plus the tests' own app and knobs.

Worker subprocesses started by the tests use these settings too; the test database's
name reaches them through OUTBOX_TEST_DB_NAME.
"""

from __future__ import annotations

import os
from typing import Any

from testproject.settings import *  # noqa: F403
from testproject.settings import BASE_DIR, DATABASES, INSTALLED_APPS, MIDDLEWARE

INSTALLED_APPS = [*INSTALLED_APPS, "tests.apps.TestsConfig"]
# A strict Content-Security-Policy on every response while TEST_STRICT_CSP is on.
MIDDLEWARE = [*MIDDLEWARE, "tests.csp.strict_csp"]
TEST_STRICT_CSP = False

default: dict = DATABASES["default"]
if default["ENGINE"].endswith("sqlite3"):
    # A file, not :memory:, so worker subprocesses see the same database.
    default["TEST"] = {
        "NAME": str(BASE_DIR / os.environ.get("OUTBOX_TEST_SQLITE_NAME", "test-outbox.sqlite3"))
    }
elif default["ENGINE"].endswith("mysql"):
    if os.environ.get("OUTBOX_TEST_MARIADB_NAME"):
        # Two test runs at once on one server, as on PostgreSQL below.
        name = os.environ["OUTBOX_TEST_MARIADB_NAME"]
        default["TEST"] = {**default.get("TEST", {}), "NAME": name}
elif os.environ.get("OUTBOX_TEST_PG_NAME"):
    # Two test runs at once on one server (CI's two rows) each create their own database.
    default["TEST"] = {**default.get("TEST", {}), "NAME": os.environ["OUTBOX_TEST_PG_NAME"]}


def _test_name(database: dict) -> str:
    """The name of the database the test run creates for ``database``."""
    return str(database.get("TEST", {}).get("NAME") or f"test_{database['NAME']}")


def _beside(name: str, suffix: str) -> str:
    """A second test database's name, from the first's (a SQLite file's path too)."""
    return (
        name.replace(".sqlite3", f"-{suffix}.sqlite3")
        if name.endswith(".sqlite3")
        else (f"{name}_{suffix}")
    )


# Past one primary (docs/deployment.md): TASKS["elsewhere"] keeps its jobs in a second
# database of the same family, and, when OUTBOX_TEST_OTHER_URL names a server of another
# family (scripts/test.sh: MariaDB, in the PostgreSQL run), TASKS["other_family"] in that.
# The test run creates them only when a test asks for them: a worker subprocess has them
# only when its test says so (OUTBOX_TEST_MORE_DATABASES), as its checks would reach them.
worker_name = os.environ.get("OUTBOX_TEST_DB_NAME")
more_databases = not worker_name or os.environ.get("OUTBOX_TEST_MORE_DATABASES") == "1"
main_test_name = _test_name(default)
if worker_name:
    # A worker subprocess: talk to the databases the test run created.
    default["NAME"] = worker_name
if more_databases:
    jobs2: dict[str, Any] = {**default, "TEST": {**default.get("TEST", {})}}
    jobs2["TEST"]["NAME"] = _beside(main_test_name, "jobs2")
    if worker_name:
        jobs2["NAME"] = _beside(worker_name, "jobs2")
    DATABASES["jobs2"] = jobs2
if more_databases and os.environ.get("OUTBOX_TEST_OTHER_URL"):
    from testproject.settings import database_from_url

    other: dict[str, Any] = database_from_url(os.environ["OUTBOX_TEST_OTHER_URL"])
    other["TEST"] = {**other.get("TEST", {}), "NAME": _beside(main_test_name, "other")}
    if worker_name:
        other["NAME"] = _beside(worker_name, "other")
    DATABASES["other_family"] = other
DATABASE_ROUTERS = ["django_outbox.routers.JobsRouter"]

TASKS = {
    "default": {
        "BACKEND": "django_outbox.backend.OutboxBackend",
        "QUEUES": ["default", "emails", "reports", "slow", "limited", "rated"],
    },
}
if "jobs2" in DATABASES:
    TASKS["elsewhere"] = {
        "BACKEND": "django_outbox.backend.OutboxBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"DATABASE": "jobs2"},
    }
if "other_family" in DATABASES:
    TASKS["other_family"] = {
        "BACKEND": "django_outbox.backend.OutboxBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"DATABASE": "other_family"},
    }

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "redis": {
        "BACKEND": "django_redis.cache.RedisCache",
        # Another database number keeps two test runs at once apart (CI's two rows).
        "LOCATION": os.environ.get("OUTBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
        "KEY_PREFIX": "outbox-tests",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 5},
    },
}

OUTBOX = {
    "WAKE": os.environ.get("OUTBOX_TEST_WAKE", "auto"),
    "REDIS_ALIAS": "redis",
    "STALLED_CHECK_SECONDS": float(os.environ.get("OUTBOX_TEST_STALLED_CHECK_SECONDS", "5")),
    "POLL_INTERVAL": float(os.environ.get("OUTBOX_TEST_POLL_INTERVAL", "0.05")),
    "LEASE_SECONDS": float(os.environ.get("OUTBOX_TEST_LEASE_SECONDS", "3")),
    "HEARTBEAT_SECONDS": float(os.environ.get("OUTBOX_TEST_HEARTBEAT_SECONDS", "0.5")),
    "WEBHOOKS": {
        # The receivers in the tests are plain HTTP servers on 127.0.0.1.
        "ALLOW_HTTP": True,
        "ALLOWED_NETWORKS": ["127.0.0.1/32"],
        "CONNECT_TIMEOUT": 1.0,
        "TIMEOUT": 2.0,
        "RETRY_SCHEDULE": [0, 0.2, 0.2, 0.2],
    },
}

if os.environ.get("OUTBOX_TEST_PARTITIONED") == "1":
    # The job table is partitioned for the session (tests/conftest.py), as a project that
    # set this and ran outbox_partition has it.
    OUTBOX["RETENTION"] = {"OLDER_THAN": "30d", "PARTITIONS": True}

if os.environ.get("OUTBOX_TEST_SECOND_ALIAS"):
    # Worker subprocesses of tests/test_tasks_contract.py: a second alias on this database.
    TASKS["second"] = {
        "BACKEND": "django_outbox.backend.OutboxBackend",
        "QUEUES": ["default", "q2"],
    }

if os.environ.get("OUTBOX_TEST_LIMITED"):
    # Worker subprocesses of the concurrency-limit test share its limit.
    OUTBOX["QUEUES"] = {"limited": {"concurrency": int(os.environ["OUTBOX_TEST_LIMITED"])}}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
