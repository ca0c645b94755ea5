"""runworker in a brand-new project, as a newcomer meets it: it says what it does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest

from tests import newproject


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    created = newproject.create(tmp_path_factory.mktemp("new"))
    migrated = created.manage("migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    return created


def test_runworker_says_what_it_runs_with_and_how_it_stopped_without_any_logging_setup(project):
    out = project.manage("runworker", "--burst")
    assert out.returncode == 0, out.stderr
    assert "started: backend default, queues default,emails,webhooks, 4 threads" in out.stderr
    assert "database default (sqlite " in out.stderr
    assert "wake-ups: poll" in out.stderr
    assert "settings: OUTBOX is not set (every setting at its default)" in out.stderr
    assert "takes effect when the worker restarts" in out.stderr
    assert "stopped: 0 runs finished" in out.stderr


def test_runworker_verbosity_0_prints_no_progress_lines(project):
    out = project.manage("runworker", "--burst", "-v", "0")
    assert out.returncode == 0, out.stderr
    assert "started:" not in out.stderr and "stopped:" not in out.stderr


def test_ctrl_c_stops_the_worker_with_its_summary_and_exit_status_0(project):
    worker = project.start("runworker")
    try:
        deadline = time.monotonic() + 60
        said = ""
        assert worker.stderr is not None
        while "started:" not in said and time.monotonic() < deadline:
            said += worker.stderr.readline()
        assert "started:" in said
        worker.send_signal(signal.SIGINT)
        _, rest = worker.communicate(timeout=60)
    finally:
        worker.kill()
    assert worker.returncode == 0
    assert "stopped: 0 runs finished" in rest


USER_SUITE = """
import threading

from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase

from django_outbox.testing import run_jobs
from shop.tasks import ping


class Enqueues(TransactionTestCase):
    def test_commits_that_signal_a_queue_many_times_in_a_row(self):
        for _ in range(20):
            with transaction.atomic():
                ping.enqueue()
        threads = [threading.Thread(target=self.enqueue_in_a_thread) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(len(run_jobs()), 24)

    def enqueue_in_a_thread(self):
        try:
            with transaction.atomic():
                ping.enqueue()
        finally:
            connection.close()


class InATestCase(TestCase):
    def test_an_enqueue_in_the_test_transaction(self):
        ping.enqueue()
        self.assertEqual(len(run_jobs()), 1)


def test_with_pytest(transactional_db, outbox_run_jobs):
    with transaction.atomic():
        ping.enqueue()
    assert len(outbox_run_jobs()) == 1
"""


def test_a_users_own_postgresql_test_suite_tears_down_under_both_runners(tmp_path):
    """The user's test database is dropped at the end: nothing of ours keeps a connection
    to it (a sender thread once did, once a queue was signalled twice within 50 ms)."""
    psycopg = pytest.importorskip("psycopg")
    url = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    if not url.startswith("postgres"):
        pytest.skip("PostgreSQL's own (the SQLite and PostgreSQL runs have it)")
    try:
        psycopg.connect(url.replace("postgres://", "postgresql://", 1), connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("OUTBOX_REQUIRE_SERVICES") == "1":
            raise
        pytest.skip(f"PostgreSQL is not reachable at {url}: {exc}")
    parts = urlsplit(url)
    test_name = f"test_outbox_usersuite_{os.getpid()}"
    project = newproject.create(
        tmp_path,
        newproject.SETTINGS_ADDED
        + f"""
INSTALLED_APPS.append("shop")
DATABASES = {{"default": {{
    "ENGINE": "django.db.backends.postgresql",
    "NAME": {parts.path.lstrip("/")!r},
    "USER": {parts.username or "postgres"!r},
    "HOST": {parts.hostname!r},
    "PORT": {parts.port or 5432},
    "TEST": {{"NAME": {test_name!r}}},
}}}}
""",
    )
    shop = project.directory / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "tasks.py").write_text(
        "from django_outbox.compat import task\n\n\n@task\ndef ping():\n    return 'pong'\n"
    )
    (shop / "tests.py").write_text(USER_SUITE)
    (project.directory / "pytest.ini").write_text(
        "[pytest]\nDJANGO_SETTINGS_MODULE = newsite.settings\npython_files = tests.py\n"
    )

    django_runner = project.manage("test", "shop", "--noinput", timeout=300)
    said = django_runner.stdout + django_runner.stderr
    assert django_runner.returncode == 0, said
    assert "Ran 2 tests" in said and "being accessed by other users" not in said

    with_pytest = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "shop/tests.py"],
        cwd=project.directory,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = with_pytest.stdout + with_pytest.stderr
    assert with_pytest.returncode == 0, said
    assert "3 passed" in said and "being accessed by other users" not in said


def test_the_settings_line_masks_what_looks_secret():
    from django.test import override_settings

    from django_outbox.worker.report import describe_settings

    outbox = {"HEALTH": {"TOKEN": "s3cret-probe-token"}, "WEBHOOKS": {"ALLOW_HTTP": True}}
    with override_settings(OUTBOX=outbox):
        line = describe_settings()
    assert "s3cret-probe-token" not in line
    assert "'TOKEN': '****" in line and "'ALLOW_HTTP': True" in line
