"""Rate limits per key: at most ``rate_limit`` runs a second of a task's jobs with the same
``rate_key``, across every worker, on the token buckets of django_outbox.ratelimits.

A run over the limit reserves its own turn (one token, charged now) and goes back to the
queue until then, not counted as an attempt; the turn is noted in the job's keyword
arguments (``TURN``, taken out again before the task is called), so the run at that turn
goes without asking again. A backlog of one key so goes out at its rate, each job held
back claimed once more, at its turn, and other keys' jobs never wait for it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from django_outbox import ratelimits
from django_outbox.exceptions import RateLimited
from django_outbox.lib import text
from django_outbox.task import OutboxTask

#: The keyword argument a held-back run notes its reserved turn in.
TURN = "outbox_rate_turn"
#: A reserved turn missed by more than this (the workers were away or behind) is not simply
#: taken: the run goes only if a token is free now, else reserves anew.
GRACE_SECONDS = 5.0


def bucket(key: str) -> str:
    """The token bucket of a rate key."""
    return f"key:{key}"


def wait_for_turn(
    task: OutboxTask, args: list[Any], kwargs: dict[str, Any], attempt: int
) -> dict[str, Any]:
    """The keyword arguments to call the task with, once this run may go under its key's
    rate limit; else RateLimited, with the turn reserved for it."""
    turn = kwargs.get(TURN)
    if turn is not None:
        kwargs = {name: value for name, value in kwargs.items() if name != TURN}
    key = task.rate_key_for(args, kwargs)
    if key is None or task.rate_limit is None:
        return kwargs
    rate = ratelimits.Rate.of(task.rate_limit, task.rate_burst)
    now = time.time()
    if isinstance(turn, dict) and turn.get("attempt") == attempt:
        if now <= turn["at"] + max(rate.capacity, GRACE_SECONDS):
            return kwargs  # its turn, paid for when it was reserved
        if ratelimits.take(bucket(key), rate, 1).granted:
            return kwargs  # late, and a token is free now
    wait = ratelimits.reserve(bucket(key), rate)
    if wait <= 0:
        return kwargs
    at = now + wait
    raise RateLimited(
        datetime.fromtimestamp(at, tz=UTC),
        f"key {key!r} runs at most {text.number(task.rate_limit)} jobs a second: "
        f"held back {text.duration(wait)}",
        kwargs={**kwargs, TURN: {"at": at, "attempt": attempt}},
    )
