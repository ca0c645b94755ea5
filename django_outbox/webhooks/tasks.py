"""The job that runs a delivery: its path is what ``send()`` writes into each job row."""

from __future__ import annotations

from django.tasks import TaskContext, task

from django_outbox import conf

_options = conf.get().WEBHOOKS


@task(queue_name=_options.QUEUE, backend=_options.BACKEND, takes_context=True)
def deliver(
    context: TaskContext, delivery_id: int, rate_turn: dict[str, float] | None = None
) -> str:
    """``rate_turn``: the turn a held-back run of this job reserved under its endpoint's
    rate limit: ``{"at": seconds since the epoch, "attempt": the attempt it is for}``."""
    from django_outbox.webhooks.delivery import run

    return run(delivery_id, retry=context.attempt > 1, rate_turn=rate_turn)
