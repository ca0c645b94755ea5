"""A run skips the TaskResult and the signal that nobody would see, and only those."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from django_outbox.compat import BACKPORT, LOGGER_NAME, task_finished, task_started
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


@pytest.fixture
def django_default_logging(settings):
    """Django's own LOGGING, as a project without a LOGGING setting runs with it: the
    ``django`` logger at INFO, a console that writes under DEBUG only, the admins' mail for
    errors."""
    import logging.config

    from django.utils.log import DEFAULT_LOGGING

    saved = {
        name: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    root = (logging.root.level, list(logging.root.handlers))
    logging.config.dictConfig(DEFAULT_LOGGING)
    # The framework's logger as a project without LOGGING has it (tests/settings.py gives
    # it a handler of its own): on Django 6 a child of "django", which dictConfig has just
    # reset; the backport's "django_tasks" is not.
    framework = logging.getLogger(LOGGER_NAME)
    framework.setLevel(logging.NOTSET)
    framework.handlers[:] = []
    framework.propagate = True
    yield
    for name, (level, handlers, propagate, disabled) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate, logger.disabled = propagate, disabled
    logging.root.setLevel(root[0])
    logging.root.handlers[:] = root[1]


@contextmanager
def root_without_handlers() -> Iterator[None]:
    """The root logger as a project leaves it: no handlers. (pytest gives it capturing
    handlers for each phase of a test, which would write every line.)"""
    saved = list(logging.root.handlers)
    logging.root.handlers[:] = []
    try:
        yield
    finally:
        logging.root.handlers[:] = saved


@pytest.mark.skipif(BACKPORT, reason="the backport's logger, django_tasks, is not under django")
def test_under_djangos_default_logging_a_run_is_heard_only_where_a_line_is_written(
    django_default_logging, settings
):
    settings.DEBUG = False
    assert logging.getLogger(LOGGER_NAME).isEnabledFor(logging.INFO)  # and yet:
    with root_without_handlers():
        assert not heard(task_started)
        assert not heard(task_finished, logging.INFO)
        assert heard(task_finished, logging.ERROR)  # the admins' mail
        settings.DEBUG = True
        assert heard(task_started)  # the console writes it
    settings.DEBUG = False
    assert heard(task_started)  # pytest's handlers on the root write it


def test_under_djangos_default_logging_a_quick_job_builds_no_result(
    django_default_logging, settings, run_worker, monkeypatch
):
    from django_outbox.worker import executor

    settings.DEBUG = False
    built = []
    real = executor.claimed_job_result
    monkeypatch.setattr(
        executor, "claimed_job_result", lambda *a, **k: built.append(a) or real(*a, **k)
    )
    result = tasks.add.enqueue(1, 2)
    with root_without_handlers():
        run_worker(queues=["default"])
    assert tasks.add.get_result(result.id).return_value == 3
    assert built == []


@pytest.mark.skipif(BACKPORT, reason="the backport's logger, django_tasks, is not under django")
def test_a_handler_with_a_filter_of_its_own_may_write_the_line(django_default_logging, settings):
    settings.DEBUG = False
    handler = logging.StreamHandler()
    handler.addFilter(lambda record: True)
    with root_without_handlers():
        logging.getLogger("django").addHandler(handler)
        try:
            assert heard(task_started)
        finally:
            logging.getLogger("django").removeHandler(handler)
        assert not heard(task_started)


def test_root_logging_at_info_writes_every_run(django_default_logging, settings, run_worker):
    """A site that logs everything at INFO to the root's handler sees every run's line."""
    import io

    settings.DEBUG = False
    stream = io.StringIO()
    with root_without_handlers():
        logging.root.addHandler(logging.StreamHandler(stream))
        logging.root.setLevel(logging.INFO)
        assert heard(task_started)
        result = tasks.add.enqueue(2, 3)
        run_worker(queues=["default"])
    assert f"id={result.id} path=tests.tasks.add state=SUCCESSFUL" in stream.getvalue()
