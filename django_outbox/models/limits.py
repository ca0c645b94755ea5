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
