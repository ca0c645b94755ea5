"""The job that runs a delivery: its path is what ``send()`` writes into each job row."""

from __future__ import annotations

from django_outbox import conf
from django_outbox.compat import TaskContext, task
from django_outbox.exceptions import RetryAt

_options = conf.get().WEBHOOKS


@task(queue_name=_options.QUEUE, backend=_options.BACKEND, takes_context=True)
def deliver(
    context: TaskContext, delivery_id: int, rate_turn: dict[str, float] | None = None
) -> str:
    """``rate_turn``: the turn a held-back run of this job reserved under its endpoint's
    rate limit: ``{"at": seconds since the epoch, "attempt": the attempt it is for}``."""
    from django_outbox.webhooks.delivery import Earlier, run

    earlier = None
    if context.attempt > 1 and not _ended_normally(context):
        result = context.task_result
        assert result.enqueued_at is not None
        earlier = Earlier(runs=context.attempt - 1, since=result.enqueued_at)
    return run(delivery_id, retry=context.attempt > 1, rate_turn=rate_turn, earlier=earlier)


def _ended_normally(context: TaskContext) -> bool:
    """The run before this one ended as a delivery's run does (RetryAt: its attempt was
    logged), not cut short (its worker lost) nor by an error (its log write failed)."""
    errors = context.task_result.errors
    return bool(errors) and errors[-1].exception_class_path == _RETRY_AT


_RETRY_AT = f"{RetryAt.__module__}.{RetryAt.__qualname__}"
