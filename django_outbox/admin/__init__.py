"""The admin is the dashboard: every model, actions to steer them, and an overview page.

Registers the ModelAdmins of ``jobs``, ``queues``, ``webhooks`` and ``workflows`` and the
dashboard page.
"""

from django_outbox.admin import dashboard, jobs, queues, webhooks, workflows

__all__ = ["dashboard", "jobs", "queues", "webhooks", "workflows"]
