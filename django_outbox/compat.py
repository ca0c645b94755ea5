"""The tasks framework: ``django.tasks`` on Django 6, the ``django-tasks`` backport on 5.2.

Every module of django_outbox (and its tests and demo) imports the framework from here, so
nothing else knows which one is in use. The backport has the same API under the
``django_tasks`` module; two exceptions have other names there (``InvalidTaskError``,
``InvalidTaskBackendError``) and are given Django's names here, and ``normalize_json``
(``django.utils.json`` in Django 6) comes from the backport's utils. Type checking is done
against Django 6.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

try:
    import django.tasks  # noqa: F401

    BACKPORT = False
except ImportError:
    BACKPORT = True

if TYPE_CHECKING or not BACKPORT:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskException,
        TaskResultDoesNotExist,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    #: The logger the framework's own signal receivers write to.
    LOGGER_NAME = "django.tasks"
else:
    try:
        from django_tasks import (
            DEFAULT_TASK_BACKEND_ALIAS,
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            default_task_backend,
            task,
            task_backends,
        )
    except ImportError as exc:
        raise ImproperlyConfigured(
            "django_outbox needs Django 6's django.tasks or, on Django 5.2, the django-tasks "
            "backport: pip install 'django-outbox-tasks[backport]'."
        ) from exc
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task, TaskError
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskException, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    LOGGER_NAME = "django_tasks"

__all__ = [
    "BACKPORT",
    "DEFAULT_TASK_BACKEND_ALIAS",
    "DEFAULT_TASK_QUEUE_NAME",
    "LOGGER_NAME",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskException",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
