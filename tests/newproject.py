"""A brand-new Django project (``django-admin startproject``) with django_outbox added as the
quickstart says: what a newcomer runs, with none of this repository's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

SETTINGS_ADDED = """
TASKS = {
    "default": {
        "BACKEND": "django_outbox.backend.OutboxBackend",
        "QUEUES": ["default", "emails"],
    }
}
"""


@dataclass(frozen=True)
class NewProject:
    directory: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "OUTBOX_")) and k != "DATABASE_URL"
        }
        # django_outbox from this checkout, as pip install -e would give it.
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        return env | extra

    def manage(
        self, *args: str, timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.directory,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=self.directory,
            env=self.env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def create(parent: Path, settings: str = SETTINGS_ADDED) -> NewProject:
    """``startproject newsite``, django_outbox in INSTALLED_APPS, ``settings`` appended."""
    directory = parent / "newsite"
    directory.mkdir()
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "newsite", str(directory)],
        check=True,
        capture_output=True,
    )
    path = directory / "newsite" / "settings.py"
    text = path.read_text()
    text = text.replace("INSTALLED_APPS = [", 'INSTALLED_APPS = [\n    "django_outbox",', 1)
    path.write_text(text + settings)
    return NewProject(directory)
