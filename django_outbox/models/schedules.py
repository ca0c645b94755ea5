"""Where each cron schedule stands: the last tick enqueued for it."""

from __future__ import annotations

from django.db import models


class ScheduleState(models.Model):
    """One row per schedule of ``OUTBOX["SCHEDULES"]``.

    Moving ``last_tick`` forward from the value a worker read is what entitles that worker
    to enqueue the ticks in between: of several workers looking at once, one wins."""

    name = models.CharField(max_length=100, primary_key=True)
    last_tick = models.DateTimeField()

    class Meta:
        db_table = "django_outbox_schedule_state"
        verbose_name = "schedule"

    def __str__(self) -> str:
        return f"{self.name} (last tick {self.last_tick:%Y-%m-%d %H:%M} UTC)"
