import os

from django.apps import AppConfig


class TestsConfig(AppConfig):
    name = "tests"
    label = "outbox_tests"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        if os.environ.get("OUTBOX_TEST_DIALECT") == "mysql":
            # MySQL's own code paths (no INSERT … RETURNING) on the MariaDB server of the
            # tests: everything else MySQL runs is what MariaDB runs. Worker subprocesses
            # inherit the variable.
            from django_outbox import db

            db._DIALECTS["mariadb"] = db._DIALECTS["mysql"]
