"""Settings for the demo and the tests: SQLite by default, PostgreSQL with DATABASE_URL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-outbox-demo-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_outbox",
    "testproject.shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = None


def database_from_url(url: str) -> dict:
    """A DATABASES entry from ``postgres://user:password@host:port/name`` or
    ``mysql://user:password@host:port/name`` (MariaDB or MySQL)."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        engine = "django.db.backends.postgresql"
    elif parts.scheme in ("mysql", "mariadb"):
        engine = "django.db.backends.mysql"
    else:
        raise ValueError(
            f"DATABASE_URL must start with postgres:// or mysql://, not {parts.scheme}://"
        )
    database: dict[str, Any] = {
        "ENGINE": engine,
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }
    if engine.endswith("mysql"):
        # What django_outbox wants from MariaDB and MySQL (docs/databases.md; its system
        # checks say so when these are missing): READ COMMITTED, Django's default, said
        # aloud, and utf8mb4, so that any text round-trips.
        database["OPTIONS"] = {"isolation_level": "read committed", "charset": "utf8mb4"}
        database["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_bin"}
    return database


SQLITE_DATABASE = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": os.environ.get("OUTBOX_SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
    # What django_outbox wants from SQLite (its system checks say so when these are missing):
    # IMMEDIATE transactions take the write lock up front, so a transaction that reads then
    # writes never fails with "database is locked"; WAL lets readers work while one writes;
    # the timeout is how long a writer waits for the lock.
    "OPTIONS": {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    },
}

DATABASES = {
    "default": (
        database_from_url(os.environ["DATABASE_URL"])
        if os.environ.get("DATABASE_URL")
        else SQLITE_DATABASE
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TASKS: dict[str, dict[str, Any]] = {
    "default": {
        "BACKEND": "django_outbox.backend.OutboxBackend",
        "QUEUES": ["default", "emails", "reports"],
    }
}

OUTBOX: dict = {
    "WEBHOOKS": {
        # The demo's webhook receiver is a plain HTTP server on 127.0.0.1. A real site
        # leaves both out: webhooks then go over https to public addresses only.
        "ALLOW_HTTP": True,
        "ALLOWED_NETWORKS": ["127.0.0.1/32"],
    },
}

# Redis is optional: REDIS_URL=redis://127.0.0.1:6379/0 adds a django-redis cache that
# django_outbox uses for wake-ups (OUTBOX["WAKE"] = "auto" picks it up on SQLite).
CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}
if os.environ.get("REDIS_URL"):
    CACHES["redis"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ["REDIS_URL"],
    }
    OUTBOX["REDIS_ALIAS"] = "redis"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_outbox": {"handlers": ["console"], "level": "INFO"},
        # The tasks framework's own lines: django.tasks on Django 6, django_tasks (the
        # backport) on 5.2.
        "django.tasks": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        "django_tasks": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
# DJANGO_LOGGING (the benchmarks' --logging): "default" is Django's own logging, as in a
# project without LOGGING; "info" sends every logger's lines from INFO up to the console.
if os.environ.get("DJANGO_LOGGING") == "default":
    LOGGING = {}
elif os.environ.get("DJANGO_LOGGING") == "info":
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": LOGGING["formatters"],
        "handlers": LOGGING["handlers"],
        "root": {"handlers": ["console"], "level": "INFO"},
    }
