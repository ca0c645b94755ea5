"""Database routers: ``DATABASE_ROUTERS = ["django_outbox.routers.JobsRouter", …]`` when a
TASKS alias keeps its jobs in a database of its own (``OPTIONS["DATABASE"]``; see
docs/deployment.md)."""

from django_outbox.db.routing import JobsRouter

__all__ = ["JobsRouter"]
