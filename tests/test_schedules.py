"""Cron schedules: each tick enqueued once, however many workers look; missed ticks by
policy; time zones; the system check."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core import checks
from django.test.utils import override_settings
from django.utils import timezone

from django_outbox import schedules
from django_outbox.models import Job, JobStatus, ScheduleState

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 10, 0, 30, tzinfo=UTC)


def every_minute(missed: str = "latest", **extra) -> dict:
    spec = {"task": "tests.tasks.add", "cron": "* * * * *", "args": [1, 2], "missed": missed}
    return {"OUTBOX": {"SCHEDULES": {"sums": spec | extra}}}


def test_a_new_schedule_starts_now_and_enqueues_its_next_tick_once():
    with override_settings(**every_minute()):
        assert schedules.enqueue_due(T0) == []  # seen for the first time: nothing is owed
        assert ScheduleState.objects.get(name="sums").last_tick == T0
        (result,) = schedules.enqueue_due(T0 + timedelta(seconds=40))  # 10:01:10
        assert schedules.enqueue_due(T0 + timedelta(seconds=50)) == []  # already enqueued
    job = Job.objects.for_result(result.id).get()
    assert job.task_path == "tests.tasks.add" and job.args == [1, 2]
    assert job.run_at == datetime(2026, 12, 3, 10, 1, tzinfo=UTC)
    assert job.dedup_key == "outbox.schedule:sums:2026-12-03T10:01:00Z"


@pytest.mark.parametrize(
    "missed, cron, later, expected",
    [
        ("latest", "* * * * *", timedelta(minutes=5), ["10:05"]),
        ("all", "* * * * *", timedelta(minutes=5), ["10:01", "10:02", "10:03", "10:04", "10:05"]),
        ("skip", "* * * * *", timedelta(minutes=5), ["10:05"]),  # 30 s late: on time
        ("skip", "0 * * * *", timedelta(hours=2, minutes=5), []),  # 12:00 is 5 min late
        ("latest", "0 * * * *", timedelta(hours=2, minutes=5), ["12:00"]),
    ],
)
def test_ticks_missed_while_no_worker_ran(missed, cron, later, expected):
    with override_settings(**every_minute(missed, cron=cron)):
        schedules.enqueue_due(T0)
        results = schedules.enqueue_due(T0 + later)
        latest_due = schedules.schedules()[0].ticks_between(T0, T0 + later)[-1]
    assert [f"{Job.objects.for_result(r.id).get().run_at:%H:%M}" for r in results] == expected
    # Whatever was enqueued, the missed ticks are behind the schedule now.
    assert ScheduleState.objects.get().last_tick == latest_due


@pytest.mark.django_db(transaction=True)
def test_many_workers_looking_at_once_enqueue_each_tick_once():
    from django.db import connections

    with override_settings(**every_minute("all")):
        schedules.enqueue_due(T0)
        start = threading.Barrier(8)
        enqueued = []

        def look() -> None:
            start.wait()
            try:
                enqueued.extend(schedules.enqueue_due(T0 + timedelta(minutes=3)))
            finally:
                connections.close_all()

        threads = [threading.Thread(target=look) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
    assert len(enqueued) == 3
    assert sorted(Job.objects.values_list("dedup_key", flat=True)) == [
        f"outbox.schedule:sums:2026-12-03T10:0{minute}:00Z" for minute in (1, 2, 3)
    ]


def test_ticks_follow_the_schedules_time_zone_across_daylight_saving():
    nightly = schedules.Schedule("nightly", "tests.tasks.noop", "0 3 * * *", "Europe/Paris")
    winter = nightly.ticks_between(T0, T0 + timedelta(days=1))
    assert winter == [datetime(2026, 12, 4, 2, 0, tzinfo=UTC)]  # 03:00 CET
    summer = nightly.next_tick(datetime(2026, 7, 1, tzinfo=UTC))
    assert summer == datetime(2026, 7, 1, 1, 0, tzinfo=UTC)  # 03:00 CEST


def schedule_errors(spec) -> list[str]:
    with override_settings(OUTBOX={"SCHEDULES": spec}):
        return [
            m.msg for m in checks.run_checks(databases=["default"]) if m.id == "django_outbox.E004"
        ]


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"cron": "61 * * * *"},
            "OUTBOX['SCHEDULES']['nightly']['cron']: '61 * * * *' is not a valid cron "
            "expression (five fields: minute hour day month weekday, e.g. '0 3 * * *').",
        ),
        ({"cron": "every day"}, "is not a valid cron expression"),
        ({"task": "tests.tasks.nothing_here"}, "could not be imported"),
        ({"task": "tests.tasks.Any"}, "not a task"),
        ({"timezone": "Mars/Olympus"}, "'Mars/Olympus' is not a known time zone"),
        ({"missed": "some"}, "['missed'] must be one of latest, all, skip"),
        ({"args": [{1, 2}]}, "must be JSON-serialisable"),
        ({"args": "1, 2"}, "['args'] must be a list"),
        (
            {"every": "day"},
            "OUTBOX['SCHEDULES']['nightly']['every'] is not a known key (known: task, cron, "
            "timezone, args, kwargs, missed).",
        ),
        (
            {"cron": ""},
            "OUTBOX['SCHEDULES']['nightly']['cron'] must be a non-empty string, not ''.",
        ),
        ({"task": 5}, "OUTBOX['SCHEDULES']['nightly']['task'] must be a non-empty string, not 5."),
    ],
)
def test_a_bad_schedule_is_a_system_check_error(spec, message):
    base = {"task": "tests.tasks.noop", "cron": "0 3 * * *"}
    errors = schedule_errors({"nightly": base | spec})
    assert len(errors) == 1 and message in errors[0], errors


def test_each_missing_or_unknown_key_is_its_own_error():
    errors = schedule_errors({"nightly": {"crom": "0 3 * * *", "tsk": "tests.tasks.noop"}})
    assert errors == [
        "OUTBOX['SCHEDULES']['nightly']['crom'] is not a known key (known: task, cron, "
        "timezone, args, kwargs, missed).",
        "OUTBOX['SCHEDULES']['nightly']['tsk'] is not a known key (known: task, cron, "
        "timezone, args, kwargs, missed).",
        "OUTBOX['SCHEDULES']['nightly']['task'] is missing.",
        "OUTBOX['SCHEDULES']['nightly']['cron'] is missing.",
    ]
    assert schedule_errors({"": {"task": "tests.tasks.noop", "cron": "0 3 * * *"}}) == [
        "OUTBOX['SCHEDULES']['']: a schedule's name must be a string of 1 to 100 characters."
    ]


def test_good_schedules_pass_the_check():
    assert schedule_errors({"nightly": {"task": "tests.tasks.noop", "cron": "0 3 * * *"}}) == []
    with override_settings(OUTBOX={"SCHEDULES": ["nightly"]}):
        assert any(
            "must be a dict of schedules" in m.msg for m in checks.run_checks(databases=["default"])
        )


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_a_schedule_every_second():
    from django_outbox.worker import Worker
    from django_outbox.worker.process import start_in_thread
    from tests.conftest import stop_pool

    spec = {"task": "tests.tasks.noop", "cron": "* * * * * *"}  # croniter: seconds last
    with override_settings(OUTBOX={"SCHEDULES": {"heartbeat": spec}}):
        worker = Worker(queues=["default"], concurrency=2)
        thread = start_in_thread(worker)
        try:
            deadline = timezone.now() + timedelta(seconds=10)
            while timezone.now() < deadline:
                done = Job.objects.filter(
                    dedup_key__startswith="outbox.schedule:heartbeat:",
                    status=JobStatus.SUCCEEDED,
                ).count()
                if done >= 2:
                    break
                threading.Event().wait(0.1)
        finally:
            worker.request_stop("test done")
            thread.join(10)
            stop_pool(worker.pool)
    assert done >= 2
    keys = list(Job.objects.values_list("dedup_key", flat=True))
    assert len(keys) == len(set(keys))  # one job per tick
