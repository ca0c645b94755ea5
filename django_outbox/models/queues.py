"""Queues someone paused: workers claim nothing from them until they are resumed."""

from __future__ import annotations

from django.db import models


class QueueState(models.Model):
    """One row per queue someone paused or resumed (a queue without a row runs)."""

    name = models.CharField(max_length=100, primary_key=True)
    #: When the queue was paused; NULL: it runs.
    paused_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "django_outbox_queue_state"
        verbose_name = "queue"

    def __str__(self) -> str:
        return self.name
