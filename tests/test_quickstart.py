"""The README's quickstart, run as written in a new project: it works and prints no
warning."""

from __future__ import annotations

import re

import django
import pytest

from tests import newproject
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    django.VERSION < (6, 0), reason="the quickstart is written for Django 6 (django.tasks)"
)


def quickstart_blocks() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Quickstart") : readme.index("## What you get")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_quickstart_runs_as_written_and_prints_no_warning(tmp_path):
    settings_block, tasks_block, views_block, webhooks_block = quickstart_blocks()
    project = newproject.create(tmp_path, settings="")
    assert project.manage("startapp", "shop").returncode == 0
    settings = project.directory / "newsite" / "settings.py"
    # Each block says where it goes in its first line.
    assert settings_block.startswith("# newsite/settings.py: add at the end\n")
    settings.write_text(
        settings.read_text().replace('\n    "django_outbox",', "", 1) + settings_block
    )
    assert tasks_block.startswith("# shop/tasks.py\n")
    (project.directory / "shop" / "tasks.py").write_text(tasks_block)
    assert views_block.startswith("# shop/views.py\n")
    (project.directory / "shop" / "views.py").write_text(views_block)

    said = []
    migrated = project.manage("migrate")
    assert migrated.returncode == 0, migrated.stderr
    said.append(migrated.stdout + migrated.stderr)

    signup = project.manage(
        "shell",
        "-c",
        "from django.test import RequestFactory\n"
        "from shop.views import signup\n"
        "from shop.tasks import send_welcome\n"
        "response = signup(RequestFactory().post('/signup/', {'username': 'ada'}))\n"
        "import json; print('JOB', json.loads(response.content)['job'])\n",
    )
    assert signup.returncode == 0, signup.stderr
    said.append(signup.stdout + signup.stderr)
    job = re.search(r"JOB (\S+)", signup.stdout)[1]

    worker = project.manage("runworker", "--burst")
    assert worker.returncode == 0, worker.stderr
    said.append(worker.stdout + worker.stderr)
    result = project.manage(
        "shell",
        "-c",
        f"from shop.tasks import send_welcome\n"
        f"r = send_welcome.get_result({job!r})\nprint(r.status, r.return_value)\n",
    )
    assert result.stdout.splitlines()[-1] == "SUCCESSFUL welcome mail sent to user 1"
    said.append(result.stdout + result.stderr)

    hooks = project.manage("shell", "-c", webhooks_block)
    assert hooks.returncode == 0, hooks.stderr
    said.append(hooks.stdout + hooks.stderr)
    counted = project.manage(
        "shell", "-c", "from django_outbox.models import Delivery; print(Delivery.objects.count())"
    )
    assert counted.stdout.splitlines()[-1] == "1"

    for output in said:
        assert "WARNING" not in output.upper(), output
        assert "System check identified" not in output, output
