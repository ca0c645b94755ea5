"""The batched latest-attempt lookup (Outpost's ListLatestAttempts).

Deliveries retried at the same time each need their latest attempt: did it succeed
already (a worker died between sending and recording), and which number comes next. One
query answers for the whole batch: the latest attempt per delivery, no older than each
key's own bound, read through the (delivery, started_at) index. A batch whose bounds span
more than 15 minutes is split, so one old retry does not widen the range scanned for the
rest; a batch of one uses the plain single lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber

from django_outbox.models import Attempt

#: The widest span of bounds one query covers.
MAX_SPAN = timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class Key:
    delivery_id: int
    #: No attempt of this delivery is older than this (its creation, or a known attempt).
    not_before: datetime


def latest(keys: Sequence[Key]) -> list[Attempt | None]:
    """The latest attempt of each key's delivery (None: no attempt yet), in key order."""
    found: dict[int, Attempt] = {}
    for group in split(keys):
        found.update(_lookup(group))
    return [found.get(key.delivery_id) for key in keys]


def split(keys: Sequence[Key]) -> list[list[Key]]:
    """Groups of keys whose bounds lie within MAX_SPAN of each other."""
    groups: list[list[Key]] = []
    for key in sorted(keys, key=lambda k: k.not_before):
        if groups and key.not_before - groups[-1][0].not_before <= MAX_SPAN:
            groups[-1].append(key)
        else:
            groups.append([key])
    return groups


def _lookup(keys: list[Key]) -> dict[int, Attempt]:
    if len(keys) == 1:
        (key,) = keys
        one = (
            Attempt.objects.filter(delivery_id=key.delivery_id, started_at__gte=key.not_before)
            .order_by("-started_at", "-id")
            .first()
        )
        return {} if one is None else {key.delivery_id: one}
    bound = {key.delivery_id: key.not_before for key in keys}
    # Each key's own bound, on the few rows that came back.
    return {a.delivery_id: a for a in batch_query(keys) if a.started_at >= bound[a.delivery_id]}


def batch_query(keys: Sequence[Key]) -> QuerySet[Attempt]:
    """The latest attempt per delivery of ``keys``, no older than the earliest bound."""
    rows = (
        Attempt.objects.filter(
            delivery_id__in=[key.delivery_id for key in keys],
            started_at__gte=min(key.not_before for key in keys),
        )
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("delivery_id")],
                order_by=[F("started_at").desc(), F("id").desc()],
            )
        )
        .filter(rank=1)
    )
    return rows
