"""Token buckets for rate limits, when they are kept in the database (not in Redis)."""

from __future__ import annotations

from django.db import models


class RateBucket(models.Model):
    """One row per rate limit in use (a queue's, an endpoint's), read and written by one
    statement per request for tokens (see ``django_outbox.ratelimits.database``).

    The bucket is kept as GCRA keeps it: one number, the "theoretical arrival time" after
    which the bucket is full again, in seconds since the epoch."""

    key = models.CharField(max_length=255, primary_key=True)
    tat = models.FloatField()
    #: Tokens given by the last request (the statement returns it; nothing else reads it).
    granted = models.IntegerField(default=0)

    class Meta:
        db_table = "django_outbox_rate_bucket"
        verbose_name = "rate limit bucket"

    def __str__(self) -> str:
        return self.key


class LimitKey(models.Model):
    """One row per concurrency or sequence key in use (``Job.limit_key``).

    The row is the key's lock: whoever enqueues a job under the key, or ends one, writes
    it first, so that of the two the second sees what the first did and no turn is lost
    (django_outbox/jobs/keys.py). It keeps what the latest enqueue said of the key."""

    key = models.CharField(max_length=255, primary_key=True)
    #: How many of the key's jobs may be queued or running at once.
    limit = models.PositiveIntegerField(default=1)
    #: A sequence that a job failing for good holds until it is retried or skipped.
    holds_on_failure = models.BooleanField(default=False)
    #: The failed job holding the sequence (NULL: none is).
    held_by = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "django_outbox_limit_key"
        verbose_name = "limit key"

    def __str__(self) -> str:
        return self.key
