"""Commands run before ``migrate`` stop at once and say to run it (they used to retry a
missing table forever)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import ROOT

COMMANDS = [
    ["runworker", "--burst"],
    ["outbox_prune", "--older-than", "30d", "--dry-run"],
    ["outbox_health"],
    ["outbox_bench", "idle", "--workers", "1", "--seconds", "1"],
]


def manage(
    *args: str, sqlite: Path | None = None, url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python manage.py …`` of the demo project, as a user runs it."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    if sqlite is not None:
        env["OUTBOX_SQLITE_PATH"] = str(sqlite)
    if url is not None:
        env["DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_command_on_a_database_never_migrated_says_to_run_migrate(command, tmp_path):
    out = manage(*command, sqlite=tmp_path / "new.sqlite3")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "lacks django_outbox's tables" in out.stderr
    assert "Run `python manage.py migrate`" in out.stderr
    assert "retrying" not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr


def test_a_migration_not_yet_applied_is_named(tmp_path):
    *_, previous, latest = sorted(p.stem for p in (ROOT / "django_outbox/migrations").glob("0*.py"))
    db = tmp_path / "old.sqlite3"
    migrated = manage("migrate", "django_outbox", previous, sqlite=db)
    assert migrated.returncode == 0, migrated.stderr
    out = manage("runworker", "--burst", sqlite=db)
    assert out.returncode == 1
    assert f"1 not applied: django_outbox.{latest})" in out.stderr
    assert manage("migrate", sqlite=db).returncode == 0
    assert manage("runworker", "--burst", sqlite=db).returncode == 0  # migrated: it runs


def test_runworker_on_an_empty_postgresql_database_says_to_run_migrate():
    psycopg = pytest.importorskip("psycopg")
    base = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    if not base.startswith("postgres"):
        pytest.skip("PostgreSQL's own (the SQLite and PostgreSQL runs have it)")
    base = base.replace("postgres://", "postgresql://", 1)
    try:
        admin = psycopg.connect(base, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if os.environ.get("OUTBOX_REQUIRE_SERVICES") == "1":
            raise
        pytest.skip(f"PostgreSQL is not reachable at {base}: {exc}")
    name = f"outbox_unmigrated_{os.getpid()}"
    with admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
        try:
            out = manage("runworker", "--burst", url=base.rsplit("/", 1)[0] + "/" + name)
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the database 'default' lacks django_outbox's tables" in out.stderr


def test_runworker_on_an_empty_mariadb_database_says_to_run_migrate():
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("mysql"):
        pytest.skip("MariaDB's own: the MariaDB run has it")
    import MySQLdb

    parts = urlsplit(url)
    admin = MySQLdb.connect(
        host=parts.hostname, port=parts.port or 3306, user=parts.username or "", password=""
    )
    name = f"outbox_unmigrated_{os.getpid()}"
    cursor = admin.cursor()
    cursor.execute(f"DROP DATABASE IF EXISTS {name}")
    cursor.execute(f"CREATE DATABASE {name}")
    try:
        out = manage("runworker", "--burst", url=url.rsplit("/", 1)[0] + "/" + name)
    finally:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the database 'default' lacks django_outbox's tables" in out.stderr
