"""Which round of its delivery each attempt belongs to.

A resend (``webhooks.resend``, the "Resend now" and "Replay" actions) starts a new round of
attempts, numbered from 1 again, so a delivery resent once has two attempts numbered 1.
The attempt log keeps no round: it is read from the numbers. In the order a delivery's
attempts started, a round begins wherever the number does not go up.
"""

from __future__ import annotations

from collections.abc import Iterable

from django_outbox.models import Attempt


def rounds(attempts: Iterable[tuple[int, int]]) -> dict[int, int]:
    """{attempt id: its round, from 1}, given one delivery's attempts as (id, number) in
    the order they started."""
    found: dict[int, int] = {}
    round_, previous = 0, None
    for pk, number in attempts:
        if previous is None or number <= previous:
            round_ += 1
        found[pk] = round_
        previous = number
    return found


def rounds_of(delivery_ids: Iterable[int]) -> dict[int, int]:
    """{attempt id: its round} for every attempt of these deliveries: one query, through
    the (delivery, started_at) index."""
    rows = (
        Attempt.objects.filter(delivery_id__in=set(delivery_ids))
        .order_by("delivery_id", "started_at", "id")
        .values_list("delivery_id", "id", "number")
    )
    by_delivery: dict[int, list[tuple[int, int]]] = {}
    for delivery_id, pk, number in rows:
        by_delivery.setdefault(delivery_id, []).append((pk, number))
    found: dict[int, int] = {}
    for attempts in by_delivery.values():
        found.update(rounds(attempts))
    return found


def label(attempt: Attempt, round_: int | None) -> str:
    """'round 2, attempt 1': unique among its delivery's attempts."""
    return f"round {round_ or '?'}, attempt {attempt.number}"
