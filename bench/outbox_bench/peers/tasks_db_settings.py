"""Settings of the django-tasks-db peer's processes: its app and backend, on the database
that ``outbox_bench`` passes in the environment: PostgreSQL's connection string (its schema
first on the search path), or MariaDB's ``DATABASES`` entry (its own database)."""

from __future__ import annotations

import json
import os
from typing import Any

from outbox_bench.mariadb import MYSQL_ENV
from outbox_bench.peers.base import PG_ENV


def _database() -> dict[str, Any]:
    if MYSQL_ENV in os.environ:
        return dict(json.loads(os.environ[MYSQL_ENV]))
    from psycopg.conninfo import conninfo_to_dict

    db = conninfo_to_dict(os.environ[PG_ENV])
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": db.get("dbname", "postgres"),
        "USER": db.get("user", ""),
        "PASSWORD": db.get("password", ""),
        "HOST": db.get("host", ""),
        "PORT": db.get("port", ""),
        "OPTIONS": {"options": db.get("options", "")},
    }


SECRET_KEY = "outbox-bench-peer"
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db"]
DATABASES = {"default": _database()}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
