"""System checks, each with a stable id.

E001  OUTBOX is not a dict, has an unknown key, or a top-level value is wrong (a number
      out of bounds, an unknown WAKE …), or two of them disagree (HEARTBEAT_SECONDS not
      below LEASE_SECONDS, BACKOFF_CAP below BACKOFF_BASE, WEBHOOKS' TIMEOUT not below
      LEASE_SECONDS)
E002  OUTBOX["WAKE"] = "postgres" while the jobs' database is not PostgreSQL
E003  OUTBOX["WAKE"] = "redis" without a django-redis cache named OUTBOX["REDIS_ALIAS"]
E004  OUTBOX["SCHEDULES"] is not a dict, or a schedule in it is invalid (cron, task path,
      time zone, arguments)
E005  OUTBOX["WEBHOOKS"] is invalid (not a dict, an unknown key, a wrong value)
E006  OUTBOX["QUEUES"] is invalid: a queue's concurrency, rate or burst
E007  OUTBOX["RETENTION"] is invalid (not None nor a dict, an unknown key, a wrong value)
E008  OUTBOX["HEALTH"] is invalid (not a dict, an unknown key, a wrong value)
W001  a SQLite database without transaction_mode IMMEDIATE
W002  a SQLite database without WAL journal mode in init_command
W003  a SQLite database without an explicit busy timeout

The settings' ids (E001, E004's "not a dict", E005 to E008) are declared with their groups in
``django_outbox.conf``, which says which problem is whose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import checks

from django_outbox import conf

if TYPE_CHECKING:
    from django_outbox.backend import OutboxBackend

#: The OPTIONS a SQLite database shared by web processes and workers needs, all three.
SQLITE_OPTIONS = (
    '"OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20, '
    '"init_command": "PRAGMA journal_mode=WAL"}'
)


def _sqlite_hint(alias: str, key: str, value: str) -> str:
    """What to add, with the whole block to copy (django_outbox's getting-started guide,
    section "SQLite", says why)."""
    return (
        f'Add "{key}": {value} to DATABASES[{alias!r}]'
        f"['OPTIONS']; all three options a worker needs: {SQLITE_OPTIONS}."
    )


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [
        checks.Error(problem.message, id=problem.check_id, obj="settings.OUTBOX")
        for problem in conf.problems(getattr(settings, "OUTBOX", {}))
    ]


@checks.register()
def check_wake(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if conf.settings_errors(getattr(settings, "OUTBOX", {})):
        return []  # check_settings says what is wrong first
    from django.db import router

    from django_outbox.db import dialect
    from django_outbox.models import Job
    from django_outbox.wake import redis_configured

    options = conf.get()
    alias = router.db_for_write(Job)
    messages: list[checks.CheckMessage] = []
    if options.WAKE == "postgres" and not dialect(alias).listen_notify:
        messages.append(
            checks.Error(
                f"OUTBOX['WAKE'] is 'postgres' but the jobs' database {alias!r} is not "
                "PostgreSQL: no worker would ever be woken.",
                hint="Use 'auto', 'redis' or 'poll'.",
                id="django_outbox.E002",
            )
        )
    if options.WAKE == "redis" and not redis_configured(options.REDIS_ALIAS):
        messages.append(
            checks.Error(
                f"OUTBOX['WAKE'] is 'redis' but CACHES[{options.REDIS_ALIAS!r}] is not a "
                "django-redis cache.",
                hint="Add a django_redis.cache.RedisCache under that alias, or set "
                "OUTBOX['REDIS_ALIAS'] to the alias of one.",
                id="django_outbox.E003",
            )
        )
    return messages


@checks.register()
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if conf.settings_errors(getattr(settings, "OUTBOX", {})):
        return []  # check_settings says what is wrong first
    from django_outbox import schedules

    return [
        checks.Error(message, id=conf.check_id("SCHEDULES"), obj="settings.OUTBOX")
        for message in schedules.problems(conf.get().SCHEDULES)
    ]


def sqlite_checks(alias: str, database: dict[str, Any] | None = None) -> list[checks.CheckMessage]:
    """Warnings for a SQLite database (``settings.DATABASES[alias]`` unless given)."""
    chosen: dict[str, Any] = settings.DATABASES[alias] if database is None else database
    if "sqlite3" not in chosen.get("ENGINE", ""):
        return []
    options: dict[str, Any] = chosen.get("OPTIONS", {})
    where = f"settings.DATABASES[{alias!r}]"
    messages: list[checks.CheckMessage] = []
    if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
        messages.append(
            checks.Warning(
                f"{where} does not use IMMEDIATE transactions: a transaction that reads "
                "before it writes can fail with 'database is locked' while a worker writes.",
                hint=_sqlite_hint(alias, "transaction_mode", '"IMMEDIATE"'),
                id="django_outbox.W001",
            )
        )
    if "journal_mode=wal" not in str(options.get("init_command", "")).lower().replace(" ", ""):
        messages.append(
            checks.Warning(
                f"{where} does not set WAL journal mode: readers block while a worker writes.",
                hint=_sqlite_hint(alias, "init_command", '"PRAGMA journal_mode=WAL"'),
                id="django_outbox.W002",
            )
        )
    if "timeout" not in options:
        messages.append(
            checks.Warning(
                f"{where} has no explicit busy timeout: writers give up after SQLite's 5 s.",
                hint=_sqlite_hint(alias, "timeout", "20"),
                id="django_outbox.W003",
            )
        )
    return messages


def backend_checks(backend: OutboxBackend) -> list[checks.CheckMessage]:
    from django.db import router

    from django_outbox.models import Job

    return sqlite_checks(router.db_for_write(Job))
