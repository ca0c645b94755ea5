"""runworker's arguments: each bad one gets a clear error before anything runs."""

import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import ROOT


def runworker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "runworker", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": ""},
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: must be at least 1, got 0"),
        (["--processes", "-1"], "argument --processes: must be at least 1, got -1"),
        (["--batch-size", "many"], "argument --batch-size: expected a whole number, got 'many'"),
        (["--shutdown-timeout", "-5"], "argument --shutdown-timeout: must be 0 or more seconds"),
        (["--queues", ","], "name at least one queue"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_message(args, message):
    out = runworker(*args)
    assert out.returncode != 0
    assert message in out.stderr


@pytest.mark.django_db
def test_unknown_queues_are_refused():
    with pytest.raises(
        CommandError,
        match="Unknown queue\\(s\\) 'nope': TASKS\\['default'\\]\\['QUEUES'\\] lists 'default'",
    ):
        call_command("runworker", "--queues", "default,nope", "--burst")


@pytest.mark.django_db
def test_an_unknown_backend_alias_is_refused():
    with pytest.raises(CommandError, match="'other'"):
        call_command("runworker", "--backend", "other", "--burst")
