import dataclasses
from pathlib import Path

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_outbox import checks as checks_module
from django_outbox import conf
from django_outbox.checks import sqlite_checks
from django_outbox.conf import rules
from tests.layout import one_table_only

pytestmark = pytest.mark.django_db  # model checks ask SQLite about JSON support

GOOD_SQLITE = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": "x.sqlite3",
    "OPTIONS": {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode = WAL",
    },
}


def outbox_errors():
    """The errors of the settings checks: E001, E004 to E008, E011 (E002 and E003, the wake-up
    checks, come only once the settings are valid)."""
    return [
        m for m in checks.run_checks(databases=["default"]) if m.id.startswith("django_outbox.E")
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"POLL_INTERVAL": "fast"}, "OUTBOX['POLL_INTERVAL'] must be a number, not 'fast'."),
        (
            {"LEASE_SECONDS": 0},
            "OUTBOX['LEASE_SECONDS'] must be greater than 0 and at most 31,622,400 (366 days), "
            "not 0.",
        ),
        (
            {"HEARTBEAT_SECONDS": 30, "LEASE_SECONDS": 5, "WEBHOOKS": {"TIMEOUT": 1}},
            "OUTBOX['HEARTBEAT_SECONDS'] (30) must be shorter than OUTBOX['LEASE_SECONDS'] (5), "
            "or leases expire between heartbeats.",
        ),
        ({"DEFAULT_MAX_ATTEMPTS": 2.5}, "OUTBOX['DEFAULT_MAX_ATTEMPTS'] must be a whole number"),
        ({"DEFAULT_MAX_ATTEMPTS": True}, "must be a whole number, not True"),
        ({"POLL": 1}, "OUTBOX['POLL'] is not a known setting"),
        (
            {"LEASE_SECONDS": 5, "HEARTBEAT_SECONDS": 5, "WEBHOOKS": {"TIMEOUT": 1}},
            "must be shorter than",
        ),
        (
            {"LEASE_SECONDS": 12},
            "OUTBOX['WEBHOOKS']['TIMEOUT'] (15) must be shorter than OUTBOX['LEASE_SECONDS'] "
            "(12), so a delivery's lease outlasts its request.",
        ),
        ({"WEBHOOKS": []}, "OUTBOX['WEBHOOKS'] must be a dict, not list."),
        ({"WEBHOOKS": {"RETRIES": 3}}, "OUTBOX['WEBHOOKS']['RETRIES'] is not a known setting"),
        ({"WEBHOOKS": {"TIMEOUT": 0}}, "OUTBOX['WEBHOOKS']['TIMEOUT'] must be a number"),
        ({"WEBHOOKS": {"LOOKUP_BATCH_SIZE": 101}}, "at most 100, not 101"),
        (
            {"WEBHOOKS": {"LOOKUP_BATCH_WAIT_MS": -1}},
            "OUTBOX['WEBHOOKS']['LOOKUP_BATCH_WAIT_MS'] must be a number from 0 to 10,000, not -1.",
        ),
        (
            {"WEBHOOKS": {"DISABLE_AFTER_SECONDS": 0}},
            "['DISABLE_AFTER_SECONDS'] must be a number greater than 0 and at most 31,622,400 "
            "(366 days), not 0.",
        ),
        (
            {"WEBHOOKS": {"RETRY_SCHEDULE": ["1s"]}},
            "(numbers from 0 to 31,622,400 (366 days)), not ['1s'].",
        ),
        ({"WEBHOOKS": {"RETRY_SCHEDULE": []}}, "RETRY_SCHEDULE'] must be a non-empty list"),
        ({"WEBHOOKS": {"RETRY_SCHEDULE": [0, -5]}}, "RETRY_SCHEDULE'] must be a non-empty list"),
        ({"WEBHOOKS": {"ALLOWED_NETWORKS": ["10.0.0.0/33"]}}, "is not a network"),
        ({"WEBHOOKS": {"ALLOWED_NETWORKS": "10.0.0.0/8"}}, "ALLOWED_NETWORKS'] must be a list"),
        ({"WEBHOOKS": {"ALLOW_HTTP": "yes"}}, "ALLOW_HTTP'] must be True or False"),
        ({"WEBHOOKS": {"QUEUE": ""}}, "QUEUE'] must be a non-empty string"),
        (
            {"BACKOFF_BASE": 10, "BACKOFF_CAP": 1.5},
            "OUTBOX['BACKOFF_CAP'] (1.5) must not be below OUTBOX['BACKOFF_BASE'] (10).",
        ),
        ({"RETENTION": "7d"}, "OUTBOX['RETENTION'] must be a dict, not str."),
        ({"RETENTION": {"AGE": "7d"}}, "OUTBOX['RETENTION']['AGE'] is not a known setting"),
        (
            {"RETENTION": {"OLDER_THAN": "a week"}},
            "OUTBOX['RETENTION']['OLDER_THAN']: 'a week' is not an age: write a number and a "
            "unit (s, m, h, d or w), e.g. 90s, 30m, 12h, 7d, 2w.",
        ),
        ({"RETENTION": {"OLDER_THAN": 7}}, "['OLDER_THAN']: 7 is not an age"),
        (
            {"RETENTION": {"STATUSES": ["queued"]}},
            "OUTBOX['RETENTION']['STATUSES']: Jobs cannot be pruned by status 'queued': choose "
            "among succeeded, failed, cancelled (queued and running jobs are never pruned).",
        ),
        (
            {"RETENTION": {"STATUSES": []}},
            "OUTBOX['RETENTION']['STATUSES']: No job status to prune given: choose among "
            "succeeded, failed, cancelled.",
        ),
        ({"RETENTION": {"STATUSES": "failed"}}, "['STATUSES'] must be a list"),
        ({"RETENTION": {"EVERY_SECONDS": 0}}, "['EVERY_SECONDS'] must be a number greater"),
        ([("POLL_INTERVAL", 1)], "OUTBOX must be a dict, not list."),
        ({"HEALTH": "strict"}, "OUTBOX['HEALTH'] must be a dict, not str."),
        ({"HEALTH": {"MAX_AGE": 5}}, "OUTBOX['HEALTH']['MAX_AGE'] is not a known setting"),
        ({"HEALTH": {"QUEUES": "default"}}, "['QUEUES'] must be a list of queue names"),
        ({"HEALTH": {"QUEUES": ["default", ""]}}, "['QUEUES'] must be a list of queue names"),
        ({"HEALTH": {"MAX_DUE_AGE_SECONDS": 0}}, "['MAX_DUE_AGE_SECONDS'] must be a number"),
        ({"HEALTH": {"WINDOW_SECONDS": "10m"}}, "['WINDOW_SECONDS'] must be a number"),
        ({"HEALTH": {"MAX_FAILURE_RATE": 50}}, "['MAX_FAILURE_RATE'] must be a number from 0"),
        ({"HEALTH": {"MAX_FAILURE_RATE": -0.1}}, "['MAX_FAILURE_RATE'] must be a number from 0"),
        ({"HEALTH": {"MIN_FINISHED": 2.5}}, "['MIN_FINISHED'] must be a whole number"),
        ({"HEALTH": {"TOKEN": 1234}}, "['TOKEN'] must be a string, not int."),
        ({"HEALTH": {"TOKEN": "short"}}, "['TOKEN'] must be at least 16 characters long"),
    ],
)
def test_a_bad_outbox_setting_is_a_system_check_error_and_refused_at_use(value, message):
    with override_settings(OUTBOX=value):
        errors = outbox_errors()
        assert len(errors) == 1 and message in errors[0].msg
        with pytest.raises(ImproperlyConfigured, match="OUTBOX"):
            conf.get()


@one_table_only
def test_good_settings_pass_and_overrides_take_effect():
    assert outbox_errors() == []
    with override_settings(OUTBOX={"POLL_INTERVAL": 2, "DEFAULT_MAX_ATTEMPTS": 7}):
        assert conf.get().POLL_INTERVAL == 2.0 and conf.get().DEFAULT_MAX_ATTEMPTS == 7
        assert conf.get().LEASE_SECONDS == 30.0  # defaults fill the rest
    assert conf.get().DEFAULT_MAX_ATTEMPTS == 3
    assert conf.get().RETENTION is None  # nothing is pruned unless asked
    with override_settings(OUTBOX={"RETENTION": {"OLDER_THAN": "2w"}}):
        retention = conf.get().RETENTION
        assert retention is not None and retention.age.days == 14
        assert retention.STATUSES == ("succeeded", "failed", "cancelled")


def test_a_well_configured_sqlite_database_gets_no_warning():
    assert sqlite_checks("default", GOOD_SQLITE) == []
    assert sqlite_checks("default", {"ENGINE": "django.db.backends.postgresql"}) == []


@pytest.mark.parametrize(
    ("missing", "check_id"),
    [
        ("transaction_mode", "django_outbox.W001"),
        ("init_command", "django_outbox.W002"),
        ("timeout", "django_outbox.W003"),
    ],
)
def test_sqlite_without_the_recommended_options_is_warned_about(missing, check_id):
    options = {k: v for k, v in GOOD_SQLITE["OPTIONS"].items() if k != missing}
    messages = sqlite_checks("default", GOOD_SQLITE | {"OPTIONS": options})
    assert [m.id for m in messages] == [check_id]
    hint = messages[0].hint
    # What to add, and the whole block to copy; no path to a file a pip install lacks.
    assert hint.startswith(f'Add "{missing}": ') and "docs/" not in hint
    assert '"transaction_mode": "IMMEDIATE", "timeout": 20' in hint
    assert " to DATABASES['default']['OPTIONS']; all three options a worker needs: " in hint


def test_each_sqlite_warning_has_its_own_hint():
    messages = sqlite_checks("default", {"ENGINE": "django.db.backends.sqlite3"})
    assert [m.id for m in messages] == [f"django_outbox.W00{n}" for n in (1, 2, 3)]
    assert len({m.hint for m in messages}) == 3


def test_the_job_database_is_checked_while_a_tasks_backend_is_ours(settings, monkeypatch):
    # The test settings follow the recommendations: nothing to say.
    assert checks_module.check_job_database() == []
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        return
    # The settings as read, without their options (the open connection keeps its own).
    monkeypatch.setitem(settings.DATABASES["default"], "OPTIONS", {})
    assert checks_module.check_job_database in checks.registry.registry.registered_checks
    said = [m.id for m in checks_module.check_job_database()]
    assert said == [f"django_outbox.W00{n}" for n in (1, 2, 3)]
    # No backend of ours: the job database is nobody's worry (E010 says so instead).
    immediate = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    with override_settings(TASKS=immediate):
        assert checks_module.check_job_database() == []


def wake_errors():
    return [
        m
        for m in checks.run_checks(databases=["default"])
        if m.id in ("django_outbox.E002", "django_outbox.E003")
    ]


def test_wake_modes_that_cannot_work_here_are_errors():
    with override_settings(OUTBOX={"WAKE": "redis", "REDIS_ALIAS": "nope"}):
        (error,) = wake_errors()
        assert error.id == "django_outbox.E003" and "CACHES['nope']" in error.msg
    with override_settings(OUTBOX={"WAKE": "postgres"}):
        from django.db import connection

        expected = [] if connection.vendor == "postgresql" else ["django_outbox.E002"]
        assert [e.id for e in wake_errors()] == expected
    with override_settings(OUTBOX={"WAKE": "sometimes"}):
        assert "OUTBOX['WAKE'] must be one of auto, postgres, redis, poll" in outbox_errors()[0].msg
    assert wake_errors() == []


# Each group of settings has its own check id, declared with the group in conf.

GROUP_CASES = [
    ("OUTBOX", {"POLL_INTERVAL": 0}, "django_outbox.E001"),
    ("OUTBOX", {"WAKE": "pg"}, "django_outbox.E001"),
    ("OUTBOX", {"POLL": 1}, "django_outbox.E001"),
    ("OUTBOX", {"HEARTBEAT_SECONDS": 30}, "django_outbox.E001"),  # not below LEASE_SECONDS
    ("OUTBOX['SCHEDULES']", {"SCHEDULES": ["nightly"]}, "django_outbox.E004"),
    ("OUTBOX['SCHEDULES']", {"SCHEDULES": {"n": {"cron": "0 3 * * *"}}}, "django_outbox.E004"),
    ("OUTBOX['WEBHOOKS']", {"WEBHOOKS": []}, "django_outbox.E005"),
    ("OUTBOX['WEBHOOKS']", {"WEBHOOKS": {"TIMEOUT": 0}}, "django_outbox.E005"),
    ("OUTBOX['QUEUES']", {"QUEUES": ["reports"]}, "django_outbox.E006"),
    ("OUTBOX['QUEUES']", {"QUEUES": {"q": {"rate": 0}}}, "django_outbox.E006"),
    ("OUTBOX['QUEUES']", {"QUEUES": {"q": {"burst": 3}}}, "django_outbox.E006"),  # no rate
    ("OUTBOX['RETENTION']", {"RETENTION": {"OLDER_THAN": "soon"}}, "django_outbox.E007"),
    ("OUTBOX['HEALTH']", {"HEALTH": {"MIN_FINISHED": 0}}, "django_outbox.E008"),
    ("OUTBOX['PORTAL']", {"PORTAL": {"CORS_ORIGINS": ["*"]}}, "django_outbox.E011"),
]  # fmt: skip


@pytest.mark.parametrize(("group", "outbox", "check_id"), GROUP_CASES)
def test_a_bad_value_is_reported_under_its_groups_own_check_id(group, outbox, check_id):
    with override_settings(OUTBOX=outbox):
        # Errors: the warnings about the database (W004: polling on MariaDB) are another
        # matter.
        found = [
            m.id
            for m in checks.run_checks(databases=["default"])
            if m.id.startswith("django_outbox.E")
        ]
    assert found and set(found) == {check_id}
    assert conf.check_ids()[group] == check_id


def test_every_group_of_settings_has_a_check_id_and_a_case_above():
    ids = conf.check_ids()
    assert {group for group, _, _ in GROUP_CASES} == set(ids)
    assert len(set(ids.values())) == len(ids)  # one group, one id
    assert conf.check_id("SCHEDULES") == "django_outbox.E004"  # the schedules' check uses it
    assert conf.check_id("POLL_INTERVAL") == "django_outbox.E001"


GOOD_EVERYWHERE = {
    "POLL_INTERVAL": 2,
    "WAKE": "poll",
    "WEBHOOKS": {"TIMEOUT": 10, "ALLOWED_NETWORKS": ["10.0.0.0/8"], "RETRY_SCHEDULE": [0, 5]},
    "QUEUES": {"reports": {"concurrency": 2}, "emails": {"rate": 5, "burst": 10}},
    "RETENTION": {"OLDER_THAN": "2w", "STATUSES": ["succeeded"]},
    "HEALTH": {"QUEUES": ["default"], "TOKEN": "t" * 16, "MAX_FAILURE_RATE": 0},
    "SCHEDULES": {"nightly": {"task": "tests.tasks.noop", "cron": "0 3 * * *"}},
    "PORTAL": {"CORS_ORIGINS": ["https://app.example.com", "http://localhost:3000"]},
}


@one_table_only
def test_a_good_value_in_every_group_yields_no_check_message():
    with override_settings(OUTBOX=GOOD_EVERYWHERE):
        assert [
            m for m in checks.run_checks(databases=["default"]) if m.id.startswith("django_outbox.")
        ] == []
        settings = conf.get()
    # Coerced to the declared types: tuples from lists, floats from ints.
    assert settings.WEBHOOKS.RETRY_SCHEDULE == (0, 5) and settings.POLL_INTERVAL == 2.0
    assert isinstance(settings.POLL_INTERVAL, float)
    assert settings.WEBHOOKS.ALLOWED_NETWORKS == ("10.0.0.0/8",)
    assert settings.QUEUES["emails"].rate == 5.0 and settings.QUEUES["reports"].concurrency == 2
    assert settings.RETENTION is not None and settings.RETENTION.STATUSES == ("succeeded",)
    assert settings.HEALTH.QUEUES == ("default",) and settings.HEALTH.MAX_FAILURE_RATE == 0.0
    assert settings.PORTAL.CORS_ORIGINS == ("https://app.example.com", "http://localhost:3000")


def declared_groups(group=conf.OutboxSettings):
    """Every group of settings, OUTBOX's first, then those nested in it."""
    found = [group]
    for declaration in rules.declared(group).values():
        if isinstance(declaration.rule, rules.Group | rules.ByName):
            found += declared_groups(declaration.rule.group)
    return found


def test_every_setting_is_declared_with_a_doc_line_and_a_default_that_passes_its_rule():
    groups = declared_groups()
    assert {g.__name__ for g in groups} == {
        "OutboxSettings", "WebhookSettings", "RetentionSettings", "QueueSettings", "HealthSettings",
        "PortalSettings",
    }  # fmt: skip
    for group in groups:
        declarations = rules.declared(group)
        # Every field is a declared setting: none slips past validation.
        assert list(declarations) == [f.name for f in dataclasses.fields(group)]
        defaults = group()
        for name, declaration in declarations.items():
            doc = declaration.doc
            assert doc.strip() and "\n" not in doc and len(doc) <= 90, (group, name)
            default = getattr(defaults, name)
            if dataclasses.is_dataclass(default):
                default = dataclasses.asdict(default)
            if default is None:  # not set (a queue's limits, RETENTION)
                continue
            assert declaration.rule.problems(default, name, "x") == [], (group, name)
    # All the defaults together, as a user would write them, are valid and read back as
    # themselves.
    written = dataclasses.asdict(conf.OutboxSettings())
    assert conf.settings_errors(written) == []
    assert rules.build(conf.OutboxSettings, written) == conf.OutboxSettings()


DOCS = Path(__file__).resolve().parent.parent / "docs"
#: Where each nested group's keys are documented (settings.md documents OUTBOX's own):
#: the webhooks' portal settings (PORTAL_…) on the portal's page.
GROUP_PAGES = {
    "WebhookSettings": ("webhooks.md", "portal.md"),
    "RetentionSettings": ("retention.md",),
    "QueueSettings": ("limits.md",),
    "HealthSettings": ("health.md",),
    "PortalSettings": ("portal.md",),
}


def test_the_docs_name_every_setting_and_every_check_id():
    settings_page = (DOCS / "settings.md").read_text()
    for name in rules.declared(conf.OutboxSettings):
        assert f"\n| `{name}` |" in settings_page, name  # a row of the OUTBOX table
    nested = declared_groups()[1:]
    assert set(GROUP_PAGES) == {g.__name__ for g in nested}
    for group in nested:
        page = "".join((DOCS / name).read_text() for name in GROUP_PAGES[group.__name__])
        for name in rules.declared(group):
            assert f"`{name}`" in page or f'"{name}"' in page, (group.__name__, name)
    for where, check_id in conf.check_ids().items():
        # The checks module's docstring and the settings page's table of ids list each.
        assert f"\n{check_id.removeprefix('django_outbox.')}  " in checks_module.__doc__
        assert f"\n| `{check_id}` | `{where}`" in settings_page, check_id


def backend_messages() -> list[checks.CheckMessage]:
    return [m for m in checks_module.check_backends() if m.id.startswith("django_outbox.")]


def test_no_tasks_backend_of_ours_is_an_error_that_says_what_to_add():
    assert backend_messages() == []  # the test settings' TASKS
    immediate = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}
    for tasks in ({"default": immediate}, {}):
        with override_settings(TASKS=tasks):
            (error,) = backend_messages()
            assert error.id == "django_outbox.E010"
            assert "no TASKS backend is django_outbox's" in error.msg
            assert "max_attempts" in error.msg and "TypeError" in error.msg
            assert '"BACKEND": "django_outbox.backend.OutboxBackend"' in error.hint


def test_a_default_backend_of_another_kind_beside_ours_is_warned_about():
    ours = {"BACKEND": "django_outbox.backend.OutboxBackend", "QUEUES": ["default"]}
    dummy = {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}
    with override_settings(TASKS={"default": dummy, "jobs": ours}):
        (warning,) = backend_messages()
        assert warning.id == "django_outbox.W007"
        assert "TASKS['default'] is 'django.tasks.backends.dummy.DummyBackend'" in warning.msg
        assert "backend='jobs'" in warning.hint
    # A subclass of ours is ours.
    sub = {"BACKEND": "tests.backends.SubclassedBackend", "QUEUES": ["default"]}
    with override_settings(TASKS={"default": sub}):
        assert backend_messages() == []
