"""The event types the application sends (``OUTBOX["WEBHOOKS"]["EVENT_TYPES"]``), each
with its description, an example payload and its JSON Schema: what a tenant picks from
when it subscribes an endpoint. Not the tenant's rows: every tenant sees the same list."""

from __future__ import annotations

from django.http import HttpRequest

from django_outbox import webhooks
from django_outbox.portal.api.base import Answer
from django_outbox.portal.problems import Problem
from django_outbox.portal.scoping import Scope


def listed(request: HttpRequest, scope: Scope) -> Answer:
    """Every declared type, by name, in one answer: a catalogue is short. Empty when the
    application declares none (then any event type may be sent and subscribed to)."""
    if request.GET:
        names = ", ".join(repr(name) for name in sorted(request.GET))
        raise Problem(
            "bad-request",
            f"The event types take no query parameters, not {names}.",
            errors={name: "Not a parameter of this list." for name in request.GET},
        )
    return Answer({"data": [event_type.as_dict() for event_type in webhooks.event_types()]})
