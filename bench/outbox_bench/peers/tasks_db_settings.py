"""Settings of the django-tasks-db peer's processes: its app and backend, on the database
(and in the schema) that ``outbox_bench`` passes in the environment."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

from outbox_bench.peers.base import PG_ENV

_db = conninfo_to_dict(os.environ[PG_ENV])

SECRET_KEY = "outbox-bench-peer"
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", "postgres"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        "OPTIONS": {"options": _db.get("options", "")},
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
