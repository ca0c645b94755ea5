"""The worker process: claim → run → complete, with heartbeats, rescue and shutdown."""

from django_outbox.worker.loop import Worker

__all__ = ["Worker"]
