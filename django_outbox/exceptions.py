"""django_outbox's exceptions. Each one's docstring is its default message."""

from __future__ import annotations

from typing import Any

from django.tasks.exceptions import InvalidTask, TaskException


class OutboxError(TaskException):
    """A django_outbox operation failed."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(args or (self.__doc__,)))


class InvalidTaskArguments(InvalidTask, TypeError):
    """A task's arguments must be JSON-serialisable."""


class TaskNotFound(OutboxError):
    """The job's task path does not import to a task."""


class WorkerLost(OutboxError):
    """The worker running this job stopped renewing its lease (killed, or cut off from the database), so the job was taken back."""  # noqa: E501


class JobTimeout(OutboxError):
    """The job ran longer than its task's timeout."""


class ResultNotStored(OutboxError):
    """The database refused to store this run's result."""
