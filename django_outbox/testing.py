"""Helpers for testing code that enqueues jobs and sends webhooks (see docs/testing.md).

- ``run_jobs()`` runs every due job now, in the calling thread, inside the test's own
  transaction, and returns what ran;
- ``assert_enqueued(task, args=..., kwargs=..., queue=...)`` checks that a job was
  enqueued, and says what was enqueued instead when it was not;
- ``captured_webhooks()`` answers the requests of webhook deliveries run meanwhile, without
  HTTP, and keeps them for the test to read.

The pytest plugin (``django_outbox.pytest_plugin``, loaded on its own once
django_outbox is installed) offers them as fixtures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from django.utils import timezone

from django_outbox.compat import Task, TaskResult, normalize_json
from django_outbox.jobs.claim import claim
from django_outbox.jobs.complete import complete
from django_outbox.jobs.results import to_task_result
from django_outbox.jobs.types import ClaimedJob
from django_outbox.models import Job, JobStatus

__all__ = [
    "CapturedWebhook",
    "JobsStillDue",
    "assert_enqueued",
    "captured_webhooks",
    "run_jobs",
]

#: The worker id jobs run by run_jobs() carry.
WORKER_ID = f"testing:{os.getpid()}"
#: Jobs claimed, and outcomes written, per statement.
CHUNK = 500


class JobsStillDue(AssertionError):
    """run_jobs(follow=True) went round ``max_rounds`` times and jobs were still due: the
    jobs keep enqueueing each other."""


def run_jobs(
    *,
    queues: Iterable[str] | None = None,
    follow: bool = False,
    max_rounds: int = 100,
    backend: str = "default",
) -> list[TaskResult]:
    """Run every job due now, in this thread, and return their results, in the order run.

    Each job is claimed, run and recorded as a worker would (signals included), but in the
    caller's thread and database transaction: a test sees every change at once, and a
    rollback at the test's end undoes them. ``queues``: only these (default: all).
    ``follow``: also run the jobs those jobs enqueue, round after round, until none is due
    (at most ``max_rounds``, then JobsStillDue). A failed run that will be retried is
    queued for later, as it would be, and not run again here; its result shows it.
    Timeouts are not enforced: a run takes as long as it takes.
    """
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a whole number of at least 1, not {max_rounds!r}.")
    ran: list[int] = []
    for _round in range(max_rounds):
        chosen = list(queues) if queues is not None else _due_queues(backend)
        claimed: list[ClaimedJob] = []
        while chosen:
            # Claim everything due before running any: what these runs enqueue waits for
            # the next round.
            batch = claim(WORKER_ID, chosen, CHUNK, lease_seconds=3600, backend=backend)
            if not batch:
                break
            claimed += batch
        if not claimed:
            break
        from django_outbox.worker.executor import execute, send_finished

        outcomes = [execute(job, tidy=False) for job in claimed]
        for first in range(0, len(outcomes), CHUNK):
            complete(WORKER_ID, outcomes[first : first + CHUNK])
        for outcome in outcomes:
            ran.append(outcome.job.id)
            if outcome.status != JobStatus.QUEUED:
                send_finished(outcome, outcome.status)
        if not follow:
            break
    else:
        if follow and _due_queues(backend, queues):
            raise JobsStillDue(
                f"jobs were still due after {max_rounds} rounds of run_jobs(follow=True): "
                "do they keep enqueueing each other?"
            )
    jobs = Job.objects.in_bulk(ran)
    return [to_task_result(jobs[job_id]) for job_id in ran]


def _due_queues(backend: str, among: Iterable[str] | None = None) -> list[str]:
    due = Job.objects.filter(status=JobStatus.QUEUED, run_at__lte=timezone.now(), backend=backend)
    if among is not None:
        due = due.filter(queue__in=list(among))
    return sorted(set(due.values_list("queue", flat=True)))


def assert_enqueued(
    task: Task | str,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    *,
    queue: str | None = None,
    count: int | None = None,
) -> list[TaskResult]:
    """The jobs of ``task`` (a task or its dotted path) enqueued so far whose arguments and
    queue match those given (each left out matches anything), whatever became of them.

    Raises AssertionError, listing what was enqueued for the task, when none matches, or
    when ``count`` is given and a different number does."""
    path = task if isinstance(task, str) else task.module_path
    jobs = list(Job.objects.filter(task_path=path).order_by("id"))
    wanted_args = None if args is None else normalize_json(list(args))
    wanted_kwargs = None if kwargs is None else normalize_json(dict(kwargs))
    matching = [
        job
        for job in jobs
        if (wanted_args is None or job.args == wanted_args)
        and (wanted_kwargs is None or job.kwargs == wanted_kwargs)
        and (queue is None or job.queue == queue)
    ]
    expected = (len(matching) == count) if count is not None else bool(matching)
    if not expected:
        what = _call_text(path, wanted_args, wanted_kwargs, queue)
        number = f"{count} job{'s' if count != 1 else ''} of " if count is not None else ""
        found = (
            "; ".join(_call_text(path, j.args, j.kwargs, j.queue) + f" [{j.status}]" for j in jobs)
            or "nothing"
        )
        raise AssertionError(
            f"expected {number}{what} to be enqueued; found {len(matching)} matching. "
            f"Enqueued for {path}: {found}"
        )
    return [to_task_result(job) for job in matching]


def _call_text(path: str, args: Any, kwargs: Any, queue: str | None) -> str:
    parts = [] if args is None else [repr(a) for a in args]
    parts += [] if kwargs is None else [f"{k}={v!r}" for k, v in kwargs.items()]
    shown = ", ".join(parts) if args is not None or kwargs is not None else "..."
    where = f" on queue {queue!r}" if queue is not None else ""
    return f"{path.rsplit('.', 1)[-1]}({shown}){where}"


@dataclass(frozen=True, slots=True)
class CapturedWebhook:
    """One request a delivery would have sent."""

    url: str
    #: The Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature).
    headers: dict[str, str]
    #: The whole body, decoded: {"type", "timestamp", "data"}.
    body: dict[str, Any]
    #: The body as sent and signed (``webhooks.verify(headers, content, secret)``).
    content: bytes

    @property
    def event_type(self) -> str:
        return str(self.body.get("type", ""))

    @property
    def payload(self) -> Any:
        return self.body.get("data")

    @property
    def message_id(self) -> str:
        return self.headers.get("webhook-id", "")


@dataclass
class CapturedWebhooks:
    """The requests captured so far, in the order sent; ``of(event_type)`` filters them."""

    sent: list[CapturedWebhook] = field(default_factory=list)

    def __iter__(self) -> Iterator[CapturedWebhook]:
        return iter(self.sent)

    def __len__(self) -> int:
        return len(self.sent)

    def __getitem__(self, index: int) -> CapturedWebhook:
        return self.sent[index]

    def of(self, event_type: str) -> list[CapturedWebhook]:
        return [hook for hook in self.sent if hook.event_type == event_type]


@contextmanager
def captured_webhooks(
    status: int | Callable[[CapturedWebhook], int] = 200,
) -> Iterator[CapturedWebhooks]:
    """While open, deliveries send nothing over HTTP: each request they would send is kept
    and answered with ``status`` (a number, or a function of the request), and the
    delivery is logged and retried as that answer says. Run the deliveries with
    ``run_jobs()`` (their jobs are in the webhooks queue)."""
    from django_outbox.webhooks import http

    captured = CapturedWebhooks()

    def post(
        url: str, body: bytes, headers: dict[str, str], timeout: float, connect_timeout: float
    ) -> http.Response:
        hook = CapturedWebhook(url, dict(headers), json.loads(body), body)
        captured.sent.append(hook)
        code = status(hook) if callable(status) else status
        return http.Response(started_at=timezone.now(), status_code=code, body="")

    with mock.patch.object(http, "post", post):
        yield captured
