"""runworker in a brand-new project, as a newcomer meets it: it says what it does."""

from __future__ import annotations

import signal
import time

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
