"""System checks, each with a stable id.

E001  OUTBOX is not a dict, has an unknown key, or a top-level value is wrong (a number
      out of bounds, an unknown WAKE …), or two of them disagree (HEARTBEAT_SECONDS not
      below LEASE_SECONDS, BACKOFF_CAP below BACKOFF_BASE, WEBHOOKS' TIMEOUT not below
      LEASE_SECONDS)
E002  OUTBOX["WAKE"] = "postgres" while the jobs' database is not PostgreSQL
E003  OUTBOX["WAKE"] = "redis" without a django-redis cache named OUTBOX["REDIS_ALIAS"]
E004  OUTBOX["SCHEDULES"] is not a dict, or a schedule in it is invalid (cron, task path,
      time zone, arguments)
E005  OUTBOX["WEBHOOKS"] is invalid (not a dict, an unknown key, a wrong value; an
      EVENT_TYPES entry, schema or example that is wrong, or schemas without jsonschema)
E006  OUTBOX["QUEUES"] is invalid: a queue's concurrency, rate or burst
E007  OUTBOX["RETENTION"] is invalid (not None nor a dict, an unknown key, a wrong value)
E008  OUTBOX["HEALTH"] is invalid (not a dict, an unknown key, a wrong value)
E009  a TASKS alias's OPTIONS["DATABASE"] is not in DATABASES, or is set while
      django_outbox.routers.JobsRouter is not in DATABASE_ROUTERS
E010  no TASKS alias has django_outbox's backend (TASKS missing: Django's default runs
      tasks in the request, and django_outbox's task options fail with a TypeError)
E011  OUTBOX["PORTAL"] is invalid (not a dict, an unknown key, an origin that is not one)
E012  OUTBOX["RETENTION"]["PARTITIONS"] is on while the jobs' database is not PostgreSQL
W001  a SQLite database without transaction_mode IMMEDIATE
W002  a SQLite database without WAL journal mode in init_command
W003  a SQLite database without an explicit busy timeout
W004  WAKE "auto" on a database server without LISTEN/NOTIFY (MariaDB, MySQL) and no
      Redis: idle workers poll
W005  a MariaDB/MySQL database whose isolation level is not READ COMMITTED
W006  a MariaDB/MySQL database whose sql_mode is not strict (values cut silently)
W007  TASKS["default"] is another backend while an alias has django_outbox's: a task
      without backend= goes to the other one
W008  OUTBOX["RETENTION"]["PARTITIONS"] is on but the job table is one table (run
      outbox_partition), or the job table is partitioned while it is off (workers do not
      make the days ahead at start: finished jobs may go to the default partition)

The settings' ids (E001, E004's "not a dict", E005 to E008, E011) are declared with their groups in
``django_outbox.conf``, which says which problem is whose.

One module over 400 lines: every system check of django_outbox, so that the ids above and
the checks that give them read in one place.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_outbox import conf

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
    sql = dialect(alias)
    # A database server (it has a clock of its own) serves workers on other machines: they
    # hear of commits through LISTEN/NOTIFY or Redis, or wait for their next poll.
    if (
        options.WAKE == "auto"
        and sql.server_clock
        and not sql.listen_notify
        and not redis_configured(options.REDIS_ALIAS)
    ):
        messages.append(
            checks.Warning(
                f"Idle workers will poll the jobs' database {alias!r} every "
                f"{options.POLL_INTERVAL:g} s: it has no LISTEN/NOTIFY and "
                f"CACHES[{options.REDIS_ALIAS!r}] is not a django-redis cache, so a "
                "commit cannot wake them (WAKE='auto').",
                hint="Add a django_redis.cache.RedisCache under that alias for wake-ups "
                "within milliseconds, or set OUTBOX['WAKE'] = 'poll' to say polling is "
                "meant.",
                id="django_outbox.W004",
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


ROUTER = "django_outbox.routers.JobsRouter"


@checks.register()
def check_databases(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Aliases that keep their jobs in a database of their own (docs/deployment.md)."""
    from django_outbox.db.routing import JobsRouter, named_databases

    named = named_databases()
    messages: list[checks.CheckMessage] = []
    for alias, params in getattr(settings, "TASKS", {}).items():
        options = params.get("OPTIONS", {}) if isinstance(params, dict) else {}
        value = options.get("DATABASE") if isinstance(options, dict) else None
        if value is not None and not isinstance(value, str):
            messages.append(
                checks.Error(
                    f"TASKS[{alias!r}]['OPTIONS']['DATABASE'] must be the name of one of "
                    f"DATABASES, not {value!r}.",
                    id="django_outbox.E009",
                )
            )
    for alias, database in named.items():
        if database not in settings.DATABASES:
            messages.append(
                checks.Error(
                    f"TASKS[{alias!r}]['OPTIONS']['DATABASE'] is {database!r}, which is not in "
                    f"DATABASES ({', '.join(map(repr, settings.DATABASES))}).",
                    hint="Name one of DATABASES, or leave the option out for the router's choice.",
                    id="django_outbox.E009",
                )
            )
    routers = getattr(settings, "DATABASE_ROUTERS", [])
    if named and not any(r == ROUTER or isinstance(r, JobsRouter) for r in routers):
        messages.append(
            checks.Error(
                f"TASKS[{next(iter(named))!r}] keeps its jobs in a database of its own, but "
                f"DATABASE_ROUTERS lacks {ROUTER!r}: its jobs would be written to one "
                "database and looked for in another.",
                hint=f"Put {ROUTER!r} first in DATABASE_ROUTERS.",
                id="django_outbox.E009",
            )
        )
    return messages


#: What TASKS names django_outbox's backend by (or a subclass of it).
OUR_BACKEND = "django_outbox.backend.OutboxBackend"
TASKS_EXAMPLE = (
    'TASKS = {"default": {"BACKEND": "django_outbox.backend.OutboxBackend", "QUEUES": ["default"]}}'
)


def _is_ours(path: Any) -> bool:
    """Whether the BACKEND ``path`` is django_outbox's backend or a subclass of it, found
    by name: this module is imported by the backend, not the other way round."""
    if path == OUR_BACKEND:
        return True
    try:
        backend = import_string(path)
    except (ImportError, TypeError, ValueError):
        return False  # Django's own check of the backends says so
    mro = getattr(backend, "__mro__", ())
    return any(f"{cls.__module__}.{cls.__qualname__}" == OUR_BACKEND for cls in mro)


def _our_aliases() -> list[str]:
    """The TASKS aliases whose backend is django_outbox's."""
    tasks = getattr(settings, "TASKS", None)
    return [
        alias
        for alias, params in (tasks if isinstance(tasks, dict) else {}).items()
        if isinstance(params, dict) and _is_ours(params.get("BACKEND"))
    ]


@checks.register()
def check_backends(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    tasks = getattr(settings, "TASKS", None)
    aliases = tasks if isinstance(tasks, dict) else {}
    ours = _our_aliases()
    if not ours:
        default = aliases.get("default")
        found = (isinstance(default, dict) and default.get("BACKEND")) or (
            "Django's default, the ImmediateBackend"
        )
        return [
            checks.Error(
                f"django_outbox is installed, but no TASKS backend is django_outbox's "
                f"(TASKS['default'] is {found}): tasks would not be enqueued in your "
                "database, and task options of django_outbox's (max_attempts, timeout, "
                "unique_key …) fail with a TypeError.",
                hint=f"Add to your settings: {TASKS_EXAMPLE}, with the queues your workers serve.",
                id="django_outbox.E010",
            )
        ]
    if "default" in aliases and "default" not in ours:
        return [
            checks.Warning(
                f"TASKS['default'] is {aliases['default'].get('BACKEND')!r}, not "
                f"django_outbox's (TASKS{ours!r} are): a @task without backend= is enqueued "
                "there, and django_outbox's task options on it fail with a TypeError.",
                hint=f"Give such tasks backend={ours[0]!r}, or make 'default' django_outbox's.",
                id="django_outbox.W007",
            )
        ]
    return []


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


#: What a MariaDB or MySQL database needs in its OPTIONS (docs/databases.md).
MYSQL_OPTIONS = '"OPTIONS": {"isolation_level": "read committed", "charset": "utf8mb4"}'


def mysql_checks(
    alias: str, database: dict[str, Any] | None = None, query: bool = False
) -> list[checks.CheckMessage]:
    """Warnings for a MariaDB or MySQL database (``settings.DATABASES[alias]`` unless
    given); with ``query``, its server's sql_mode is read too."""
    chosen: dict[str, Any] = settings.DATABASES[alias] if database is None else database
    if not chosen.get("ENGINE", "").endswith("mysql"):
        return []
    options: dict[str, Any] = chosen.get("OPTIONS", {})
    where = f"settings.DATABASES[{alias!r}]"
    messages: list[checks.CheckMessage] = []
    # Django sets READ COMMITTED on every connection unless OPTIONS says otherwise; None
    # leaves the server's default, REPEATABLE READ.
    level = options.get("isolation_level", "read committed")
    if str(level or "").lower() != "read committed":
        messages.append(
            checks.Warning(
                f"{where} runs transactions at {level or 'the server default'!r}, not READ "
                "COMMITTED: a claim's locks would then cover the gaps between rows too, "
                "holding up enqueues and other workers' claims until it commits.",
                hint=f'Set "isolation_level": "read committed" (Django\'s default); '
                f"the OPTIONS django_outbox expects: {MYSQL_OPTIONS}.",
                id="django_outbox.W005",
            )
        )
    if query:
        from django.db import connections

        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT @@sql_mode")
            mode = str(cursor.fetchone()[0]).upper()
        if "STRICT_TRANS_TABLES" not in mode and "STRICT_ALL_TABLES" not in mode:
            messages.append(
                checks.Warning(
                    f"The server of {where} is not in strict mode (sql_mode {mode!r}): a "
                    "job's queue name, task path or key too long for its column would be "
                    "cut short, with a warning nobody reads, instead of refused.",
                    hint="Add STRICT_TRANS_TABLES to the server's sql_mode, or set "
                    '"init_command": "SET sql_mode=\'STRICT_TRANS_TABLES\'" in OPTIONS.',
                    id="django_outbox.W006",
                )
            )
    return messages


@checks.register(checks.Tags.database)
def check_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The jobs' database as the server has it (``check --database``, and ``migrate``)."""
    from django.db import router

    from django_outbox.models import Job

    alias = router.db_for_write(Job)
    if not databases or alias not in databases:
        return []
    messages = [m for m in mysql_checks(alias, query=True) if m.id == "django_outbox.W006"]
    return messages + partition_checks(alias, query=True)


def partition_checks(alias: str, query: bool = False) -> list[checks.CheckMessage]:
    """``OUTBOX["RETENTION"]["PARTITIONS"]`` against the jobs' database (E012) and, with
    ``query``, against its job table as it is (W008)."""
    from django.db import connections

    from django_outbox.db import dialect, partitions
    from django_outbox.models import Job

    try:
        retention = conf.get().RETENTION
    except ImproperlyConfigured:
        return []  # check_settings reports it
    wanted = retention is not None and retention.PARTITIONS
    setting = 'OUTBOX["RETENTION"]["PARTITIONS"]'
    if not partitions.supported(alias):
        if not wanted:
            return []
        return [
            checks.Error(
                f"{setting} is True, but the jobs' database {alias!r} is not PostgreSQL: "
                "only PostgreSQL partitions the job table.",
                hint="Leave PARTITIONS out; retention then deletes finished jobs in chunks.",
                id="django_outbox.E012",
            )
        ]
    if not query:
        return []
    partitioned = dialect(alias).partitioned(connections[alias], Job._meta.db_table)
    if wanted and not partitioned:
        return [
            checks.Warning(
                f"{setting} is True, but the job table of {alias!r} is one table: retention "
                "deletes its rows in chunks.",
                hint="Stop the workers and run: python manage.py outbox_partition",
                id="django_outbox.W008",
            )
        ]
    if partitioned and not wanted:
        return [
            checks.Warning(
                f"The job table of {alias!r} is partitioned, but {setting} is not True: "
                "workers do not make the partitions of the days ahead when they start (only "
                "prunes do), and finished jobs of a day without one go to the default "
                "partition, which is pruned in chunks.",
                hint=f"Set {setting} = True, or run: python manage.py outbox_partition --undo",
                id="django_outbox.W008",
            )
        ]
    return []


@checks.register()
def check_job_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The options of the database the jobs are written to (SQLite's, MariaDB's), when a
    TASKS backend is django_outbox's (``check_backends`` says so when none is)."""
    from django.db import router

    from django_outbox.models import Job

    if not _our_aliases():
        return []
    alias = router.db_for_write(Job)
    return sqlite_checks(alias) + mysql_checks(alias) + partition_checks(alias)


#: Django's warnings that a database lacks partial indexes, conditional unique constraints
#: or indexes on expressions (MariaDB, MySQL): for django_outbox's own models, migration
#: 0010 creates what stands in for them there, so they would only be noise at every start.
STOOD_IN_FOR = frozenset({"models.W036", "models.W037", "models.W043"})


def _is_stood_in_for(message: checks.CheckMessage) -> bool:
    meta = getattr(message.obj, "_meta", None)
    return message.id in STOOD_IN_FOR and getattr(meta, "app_label", None) == "django_outbox"


def quiet_stood_in_warnings() -> None:
    """Drop Django's STOOD_IN_FOR warnings about django_outbox's models (and only theirs)
    from its model checks, by wrapping the registered check (called once, at start)."""
    from django.core.checks.model_checks import check_all_models

    registry = checks.registry.registry
    if check_all_models not in registry.registered_checks:
        return

    def check_models(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
        messages = check_all_models(app_configs=app_configs, **kwargs)
        return [message for message in messages if not _is_stood_in_for(message)]

    registry.registered_checks.discard(check_all_models)
    registry.register(check_models, *getattr(check_all_models, "tags", ("models",)))
