"""Forgetting the rows of keys nobody uses any more (``LimitKey``).

A concurrency or sequence key's row is written by the first enqueue under it and is the
key's lock from then on (jobs/keys.py). Without this every key ever used keeps a row: one
per customer or order ever seen, and the sweep, which reads them, would cost more with
each. The worker's maintenance runs ``forget_idle`` before each sweep.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import router, transaction
from django.db.models import Exists, OuterRef
from django.db.models.lookups import In
from django.utils import timezone

from django_outbox.jobs.keys import keyed_status
from django_outbox.models import Job, LimitKey
from django_outbox.models.jobs import ACTIVE_STATUSES

#: A key with no job left is forgotten once its row has not been written for this long:
#: a key used again soon keeps its row (and its rule) instead of churning.
IDLE_KEY_SECONDS = 60.0
#: Key rows read per transaction when forgetting idle keys; at most FORGET_MOST a call.
FORGET_CHUNK = 1000
FORGET_MOST = 20_000


def forget_idle(now: datetime | None = None, idle_seconds: float = IDLE_KEY_SECONDS) -> int:
    """Delete the rows of keys with no job waiting, held, queued or running, and no failed
    job holding them, that nobody has written for ``idle_seconds``; returns how many.

    Each chunk picks rows whose keys have no active job and locks them
    (skipping those another transaction holds: an enqueue or an ending is using the key),
    then looks for the keys' jobs in a statement of its own, which sees whatever committed
    before the lock: a key whose job arrived meanwhile keeps its row. An enqueue waiting
    on a row deleted here writes it anew once this commits."""
    using = router.db_for_write(Job)
    now = now or timezone.now()
    before = now - timedelta(seconds=idle_seconds)
    forgotten = examined = 0
    after = ""
    active = In(keyed_status(using), ACTIVE_STATUSES)
    in_use = Job.objects.filter(active, limit_key=OuterRef("key"))
    while examined < FORGET_MOST:
        with transaction.atomic(using=using):
            candidates = list(
                LimitKey.objects.using(using)
                .select_for_update(skip_locked=True)
                .filter(held_by__isnull=True, updated_at__lt=before, key__gt=after)
                .filter(~Exists(in_use))
                .order_by("key")
                .values_list("key", flat=True)[:FORGET_CHUNK]
            )
            if not candidates:
                break
            # Again, now that the rows are locked: a job may have come in between.
            used = set(
                Job.objects.using(using)
                .filter(active, limit_key__in=candidates)
                .values_list("limit_key", flat=True)
                .distinct()
            )
            idle = [key for key in candidates if key not in used]
            if idle:
                LimitKey.objects.using(using).filter(key__in=idle).delete()
        forgotten += len(idle)
        examined += len(candidates)
        after = candidates[-1]
        if len(candidates) < FORGET_CHUNK:
            break
    return forgotten
