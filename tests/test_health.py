"""``manage.py outbox_health`` and the health URL, against the real database."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.utils import timezone

import django_outbox
from django_outbox.models import Job, JobStatus, Worker
from tests import tasks
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db

TOKEN = "a-health-token-for-tests"


def health(*args: str) -> tuple[int, str]:
    """Run the command; (exit status, what it printed)."""
    out = io.StringIO()
    try:
        call_command("outbox_health", *args, stdout=out)
    except SystemExit as exit:
        return int(exit.code or 0), out.getvalue().strip()
    return 0, out.getvalue().strip()


def live_worker(queues=("default",), host=None, heartbeat_ago=0.0, stopped=False) -> Worker:
    now = timezone.now()
    return Worker.objects.create(
        id=f"w-{Worker.objects.count()}",
        hostname=host or socket.gethostname(),
        pid=1,
        queues=list(queues),
        concurrency=4,
        heartbeat_at=now - timedelta(seconds=heartbeat_ago),
        stopped_at=now if stopped else None,
    )


def test_due_jobs_without_a_live_worker_are_unhealthy():
    django_outbox.enqueue_many(tasks.noop, [((), {})] * 3)
    assert health() == (1, "unhealthy: no live worker serves queue 'default' (3 due)")


def test_a_live_worker_and_nothing_due_is_healthy():
    live_worker()
    code, line = health()
    assert (code, line) == (
        0,
        "ok: 1 live worker; 0 jobs due; no job finished in the last 10 min",
    )
    tasks.noop.enqueue()
    Job.objects.bulk_create(
        Job(task_path="tests.tasks.noop", status=status, finished_at=timezone.now())
        for status in (JobStatus.SUCCEEDED, JobStatus.SUCCEEDED, JobStatus.FAILED)
    )
    live_worker()
    assert health()[1] == (
        "ok: 2 live workers; 1 job due; 1 of 3 jobs finished in the last 10 min failed (33.3%)"
    )


def test_a_silent_or_stopped_worker_is_not_live():
    tasks.noop.enqueue()
    live_worker(heartbeat_ago=31)  # the test settings' lease is 3 s; the default 30 s
    live_worker(stopped=True)
    code, line = health()
    assert code == 1 and "no live worker serves queue 'default'" in line


def test_a_queue_named_must_have_a_worker_even_with_nothing_due():
    live_worker(queues=["default"])
    assert health("--queues", "default,emails") == (
        1,
        "unhealthy: no live worker serves queue 'emails' (nothing due yet)",
    )
    with override_settings(OUTBOX={"HEALTH": {"QUEUES": ["reports"]}}):
        assert health()[1] == "unhealthy: no live worker serves queue 'reports' (nothing due yet)"


def test_the_oldest_due_job_waiting_too_long_is_unhealthy():
    live_worker()
    late = tasks.noop.enqueue()
    Job.objects.for_result(late.id).update(run_at=timezone.now() - timedelta(minutes=10))
    code, line = health()
    assert code == 1
    assert line == (
        "unhealthy: the oldest due job of queue 'default' has waited 10 min (more than 5 min)"
    )
    assert health("--max-due-age", "3600")[0] == 0


def test_a_high_failure_rate_is_unhealthy_once_enough_jobs_finished():
    live_worker()
    now = timezone.now()

    def finished(status, n):
        Job.objects.bulk_create(
            Job(task_path="tests.tasks.noop", status=status, finished_at=now) for _ in range(n)
        )

    finished(JobStatus.FAILED, 15)
    assert health()[0] == 0  # 15 finished: fewer than MIN_FINISHED (20)
    finished(JobStatus.SUCCEEDED, 10)
    assert health() == (
        1,
        "unhealthy: 15 of the last 25 jobs finished in the last 10 min failed (60%, more than 50%)",
    )
    assert health("--max-failure-rate", "0.7")[0] == 0
    Job.objects.filter(status=JobStatus.FAILED).update(finished_at=now - timedelta(hours=1))
    assert health()[0] == 0  # out of the window


def test_a_failure_rate_just_above_the_limit_does_not_read_as_the_limit():
    live_worker()
    now = timezone.now()
    Job.objects.bulk_create(
        Job(task_path="tests.tasks.noop", status=status, finished_at=now)
        for status in [JobStatus.FAILED] * 126 + [JobStatus.SUCCEEDED] * 124
    )
    assert health()[1] == (
        "unhealthy: 126 of the last 250 jobs finished in the last 10 min failed "
        "(50.4%, more than 50%)"
    )
    assert health("--max-failure-rate", "0.5035")[1].endswith("(50.4%, more than 50.35%)")


def test_more_problems_are_counted_in_words():
    tasks.noop.enqueue()
    tasks.noop.using(queue_name="emails").enqueue()
    assert health()[1] == (
        "unhealthy: no live worker serves queue 'default' (1 due); and 1 more problem"
    )
    tasks.noop.using(queue_name="reports").enqueue()
    assert health()[1].endswith("(1 due); and 2 more problems")


def test_this_host_counts_only_this_machines_workers():
    tasks.noop.enqueue()
    live_worker(host="another-machine")
    assert health()[0] == 0
    code, line = health("--this-host")
    assert code == 1 and "no live worker serves queue 'default' (1 due)" in line


def test_json_gives_every_figure():
    live_worker()
    tasks.noop.enqueue()
    code, text = health("--json")
    data = json.loads(text)
    assert code == 0 and data["ok"] is True and data["live_workers"] == 1
    assert data["queues"] == [
        {
            "queue": "default",
            "live_workers": 1,
            "due": 1,
            "oldest_due_seconds": pytest.approx(0, abs=5),
        }
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-failure-rate", "2"], "--max-failure-rate must be from 0 to 1, not 2.0."),
        (["--max-due-age", "0"], "--max-due-age must be a number of seconds above 0, not 0.0."),
        (["--window", "-5"], "--window must be a number of seconds above 0, not -5.0."),
    ],
)
def test_bad_flags_are_refused(args, message):
    with pytest.raises(CommandError, match=f"^{message}$".replace(".", r"\.")):
        call_command("outbox_health", *args)


def test_an_unreachable_database_is_unhealthy_not_a_traceback():
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/nothing",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "outbox_health"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip() == "unhealthy: the database cannot be read (OperationalError)"
    assert "Traceback" not in done.stderr


def test_the_url_answers_staff_and_the_token_only():
    url = "/outbox/health/"
    client = Client()
    assert client.get(url).status_code == 403
    assert client.get(url).json()["reason"] == (
        "forbidden: staff only (OUTBOX['HEALTH']['TOKEN'] is not set)"
    )
    user = User.objects.create_user("ada", password="x")
    client.force_login(user)
    assert client.get(url).status_code == 403
    user.is_staff = True
    user.save()
    live_worker()
    answer = client.get(url)
    assert answer.status_code == 200 and answer.json()["ok"] is True
    assert answer["Cache-Control"].startswith("max-age=0")
    tasks.noop.using(queue_name="emails").enqueue()
    answer = client.get(url)
    assert answer.status_code == 503
    assert answer.json()["reason"] == "unhealthy: no live worker serves queue 'emails' (1 due)"
    assert client.get(url + "?queues=reports").json()["problems"][-1] == (
        "no live worker serves queue 'reports' (nothing due yet)"
    )

    anonymous = Client()
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    with override_settings(OUTBOX={"HEALTH": {"TOKEN": TOKEN}}):
        assert anonymous.get(url, **bearer).status_code == 503
        refused = anonymous.get(url, HTTP_AUTHORIZATION="Bearer wrong-token")
        assert refused.status_code == 403 and refused.json()["reason"] == (
            "forbidden: sign in as a staff user, or send "
            "Authorization: Bearer <OUTBOX['HEALTH']['TOKEN']>"
        )
    assert anonymous.get(url, **bearer).status_code == 403  # no token set: staff only
    assert client.post(url).status_code == 405
