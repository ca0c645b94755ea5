"""A backend of a project's own, built on django_outbox's (the checks take it as ours)."""

from django_outbox.backend import OutboxBackend


class SubclassedBackend(OutboxBackend):
    pass
