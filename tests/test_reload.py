"""``runworker --reload``: a change to a module the worker imported drains it (the running
job finishes, once) and a fresh worker runs the new code; signals stop both processes."""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from django_outbox.models import Job, JobStatus
from tests.conftest import wait_until

PROBE = '''"""A task module the test rewrites while a worker runs it."""

import time

from django_outbox.compat import task

VERSION = {version}


@task
def version(seconds: float = 0.0) -> int:
    time.sleep(seconds)
    return VERSION
'''


def write_probe(folder: Path, version: int) -> Path:
    path = folder / "reload_probe.py"
    path.write_text(PROBE.format(version=version))
    # Later than any time the worker saw, whatever the file system's clock resolution.
    stamp = time.time() + version
    os.utime(path, (stamp, stamp))
    return path


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """The folder of ``reload_probe`` (VERSION = 1), importable here and by the worker, and
    of ``probe_settings``, the test settings that import it as a project imports its tasks
    at start (a module imported later is watched from when the worker sees it)."""
    folder = tmp_path / "code"
    folder.mkdir()
    write_probe(folder, 1)
    (folder / "probe_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\n\nimport reload_probe  # noqa: F401\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    yield folder, importlib.import_module("reload_probe")
    sys.modules.pop("reload_probe", None)


def worker_env(folder: Path, *first: Path) -> dict[str, str]:
    path = [*map(str, first), str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path), "DJANGO_SETTINGS_MODULE": "probe_settings"}


def without_watchfiles(tmp_path: Path) -> Path:
    """A folder that, first on the path, makes ``import watchfiles`` fail as if it were not
    installed: the worker falls back to Django's StatReloader."""
    folder = tmp_path / "no-watchfiles" / "watchfiles"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('raise ImportError("watchfiles hidden by the test")\n')
    return folder.parent


def job_of(result) -> Job:
    return Job.objects.for_result(result.id).get()


@pytest.mark.parametrize("watcher", ["watchfiles", "polling"])
def test_a_change_to_the_code_lets_the_running_job_finish_then_runs_the_new_code(
    start_worker, probe, tmp_path, watcher
):
    folder, module = probe
    hidden = [without_watchfiles(tmp_path)] if watcher == "polling" else []
    worker = start_worker("--reload", "--concurrency", "2", extra_env=worker_env(folder, *hidden))

    first = module.version.enqueue()
    wait_until(lambda: job_of(first).status == JobStatus.SUCCEEDED, 30, "the first job")
    assert job_of(first).return_value == 1
    long = module.version.enqueue(seconds=2.0)
    wait_until(lambda: job_of(long).status == JobStatus.RUNNING, 20, "the long job to start")
    write_probe(folder, 2)
    wait_until(lambda: worker.log().count(" started: ") == 2, 30, "a fresh worker")

    log = worker.log()
    assert "reload_probe.py changed; restarting" in log
    expected = "watchfiles" if watcher == "watchfiles" else "polling once a second"
    assert f"restarting it when the code changes ({expected}" in log
    # The job that ran when the code changed finished in the old worker, once.
    ran = job_of(long)
    assert (ran.status, ran.attempts, ran.return_value) == (JobStatus.SUCCEEDED, 1, 1)
    after = module.version.enqueue()
    wait_until(lambda: job_of(after).status == JobStatus.SUCCEEDED, 30, "a job after the change")
    assert job_of(after).return_value == 2

    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log()
    log = worker.log()
    assert log.count(" stopped: ") == 2
    assert "took back" not in log  # no lease ran out: nothing was lost on the way


def test_a_worker_that_cannot_start_is_started_again_after_the_next_change(
    start_worker, probe, tmp_path
):
    """A file saved half-written (here: a settings module that does not import) stops the
    child; the reloader starts it again when the file is fixed."""
    folder, module = probe
    worker = start_worker("--reload", extra_env=worker_env(folder))
    wait_until(lambda: " started: " in worker.log(), 30, "the worker to start")
    # The reloader imported the settings too: a change to them restarts the child, which
    # then fails to import them.
    settings = folder / "probe_settings.py"
    good = settings.read_text()
    settings.write_text(good + "this is not Python\n")
    stamp = time.time() + 5
    os.utime(settings, (stamp, stamp))
    wait_until(
        lambda: (
            "the worker exited with status 1; starting it again when a file changes" in worker.log()
        ),
        30,
        "the reloader to see the child fail",
    )
    settings.write_text(good)
    os.utime(settings, (stamp + 5, stamp + 5))
    wait_until(lambda: worker.log().count(" started: ") == 2, 30, "the worker to start again")
    result = module.version.enqueue()
    wait_until(lambda: job_of(result).status == JobStatus.SUCCEEDED, 30, "a job")
    worker.send(signal.SIGINT)
    assert worker.wait(30) == 0, worker.log()


def test_reload_does_not_go_with_processes():
    with pytest.raises(CommandError, match=r"--reload runs one worker process .* --processes"):
        call_command("runworker", "--reload", "--processes", "2")


def test_a_worker_whose_reloader_is_killed_drains_and_exits(start_worker, probe):
    folder, _module = probe
    worker = start_worker("--reload", extra_env=worker_env(folder))
    started = wait_until(
        lambda: re.search(r"worker [^:\s]+:(\d+):\S+ started: ", worker.log()), 30, "the worker"
    )
    child = int(started.group(1))
    worker.send(signal.SIGKILL)  # the reloader only
    worker.wait(10)

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, 30, "the worker to exit")
    assert "the supervising process is gone; stopping" in worker.log()
