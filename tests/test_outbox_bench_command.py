"""``manage.py outbox_bench`` in the product: a shim that runs the benchmarks' command, or,
when the django-outbox-bench distribution is not installed, says how to install it."""

from __future__ import annotations

import importlib
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_outbox.management.commands import outbox_bench as shim


@pytest.fixture
def without_the_benchmarks(monkeypatch):
    """The shim as it loads where ``outbox_bench`` is not installed; the real one after."""
    monkeypatch.setitem(sys.modules, "outbox_bench", None)
    monkeypatch.setitem(sys.modules, "outbox_bench.command", None)
    yield importlib.reload(shim)
    monkeypatch.undo()
    importlib.reload(shim)


def test_the_shim_runs_the_benchmarks_command_when_it_is_installed():
    from outbox_bench.command import Command

    assert shim.Command is Command


@pytest.mark.parametrize("args", [[], ["drain", "--jobs", "10", "--peers"]])
def test_without_the_benchmarks_the_command_says_what_is_missing_and_how_to_install_it(
    without_the_benchmarks, args
):
    with pytest.raises(CommandError) as raised:
        call_command("outbox_bench", *args)
    message = str(raised.value)
    assert "the benchmarks, which are not installed" in message
    assert "pip install 'django-outbox-tasks[bench]'" in message
    assert "pip install -e ./bench" in message


def test_a_benchmark_missing_something_else_says_that_not_that_it_is_not_installed(
    monkeypatch,
):
    """Installed, but one of its own imports fails: that error, not the install hint."""
    monkeypatch.delitem(sys.modules, "outbox_bench.command")
    monkeypatch.setitem(sys.modules, "outbox_bench.drain", None)
    try:
        with pytest.raises(ImportError, match=r"outbox_bench\.drain"):
            importlib.reload(shim)
    finally:
        monkeypatch.undo()
        importlib.reload(shim)
