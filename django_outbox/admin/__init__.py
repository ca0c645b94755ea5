"""The admin is the dashboard: every model, actions to steer them, and an overview page.

Registers the ModelAdmins of ``jobs`` and ``webhooks`` and the dashboard page.
"""

from django_outbox.admin import dashboard, jobs, webhooks

__all__ = ["dashboard", "jobs", "webhooks"]
