"""django_outbox's exceptions. Each one's docstring is its default message."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_outbox.compat import InvalidTask, TaskException


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


class RetryAt(OutboxError):
    """Run this job again at the time given, rather than on its task's backoff schedule."""

    def __init__(self, at: datetime, *args: Any) -> None:
        super().__init__(*args)
        self.at = at


class RateLimited(OutboxError):
    """A rate limit holds this run back: the job goes back to the queue until the time given, and the run does not count as an attempt."""  # noqa: E501

    def __init__(self, at: datetime, *args: Any, kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(*args)
        self.at = at
        #: The job's keyword arguments for its next run, when they should change (a
        #: webhook delivery notes the turn it reserved); None: unchanged.
        self.kwargs = kwargs


class PermanentFailure(OutboxError):
    """This run failed in a way another attempt cannot mend: the job is not retried."""


class UnsafeDestination(OutboxError):
    """The webhook's destination is not a public address, and OUTBOX["WEBHOOKS"]["ALLOWED_NETWORKS"] does not allow it."""  # noqa: E501


class EndpointDisabled(OutboxError):
    """The endpoint is disabled: nothing is sent to it until it is enabled again."""


class Cancelled(OutboxError):
    """Raised by a task (or ``context.raise_if_cancelled()``) that stops because it was
    asked to: the job ends as cancelled, not retried."""


class UpstreamFailed(OutboxError):
    """Not run: a workflow step it waits for failed or was cancelled (the job's error
    names this class; nothing raises it)."""
