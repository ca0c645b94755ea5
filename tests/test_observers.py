"""A run skips the TaskResult and the signal that nobody would see, and only those."""

from __future__ import annotations

import logging

import pytest

from django_outbox.compat import LOGGER_NAME, task_finished, task_started
from django_outbox.jobs.observers import heard
from tests import tasks


@pytest.fixture
def framework_log(caplog):
    """The framework's logger at WARNING, as most sites keep it (tests/settings.py too)."""
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    return caplog


def test_the_framework_log_line_alone_at_a_level_its_logger_drops_is_not_heard(framework_log):
    assert not heard(task_started)
    assert not heard(task_finished, logging.INFO)
    assert heard(task_finished, logging.ERROR)  # a failure's line is logged


def test_any_other_receiver_hears_the_signals(framework_log):
    def receiver(**kwargs):
        pass

    task_started.connect(receiver)
    try:
        assert heard(task_started)
    finally:
        task_started.disconnect(receiver)
    assert not heard(task_started)


def test_with_the_framework_logger_on_every_run_is_logged(run_worker, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    assert heard(task_started) and heard(task_finished)
    results = [tasks.add.enqueue(n, n) for n in range(3)]
    run_worker(queues=["default"])
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]
    for result in results:
        assert any(f"id={result.id} " in line and "RUNNING" in line for line in lines), lines
        assert any(f"id={result.id} " in line and "SUCCESSFUL" in line for line in lines), lines


def test_a_task_that_takes_its_context_gets_its_result_whoever_listens(run_worker, framework_log):
    result = tasks.record_run.enqueue("context")
    run_worker(queues=["slow"])
    assert tasks.record_run.get_result(result.id).return_value == "context"
