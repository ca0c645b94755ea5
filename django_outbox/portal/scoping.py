"""Every row the portal reads or changes, scoped to one tenant: the views reach rows only
through a ``Scope``, so no route can reach another tenant's (``tests/test_portal_isolation.py``
calls every route with another tenant's ids).

Endpoints and messages carry their tenant; deliveries and attempts are the tenant's
through their endpoint. Another tenant's row is answered as a row that does not exist.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model, QuerySet

from django_outbox.models import Attempt, Delivery, Endpoint, EndpointHour, Message
from django_outbox.portal.problems import not_found

M = TypeVar("M", bound=Model)


class Scope:
    def __init__(self, tenant: str) -> None:
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"A portal scope needs a tenant, not {tenant!r}.")
        self.tenant = tenant

    def endpoints(self) -> QuerySet[Endpoint]:
        return Endpoint.objects.filter(tenant=self.tenant)

    def messages(self) -> QuerySet[Message]:
        return Message.objects.filter(tenant=self.tenant)

    def deliveries(self) -> QuerySet[Delivery]:
        return Delivery.objects.filter(endpoint__tenant=self.tenant)

    def attempts(self) -> QuerySet[Attempt]:
        return Attempt.objects.filter(delivery__endpoint__tenant=self.tenant)

    def endpoint_hours(self) -> QuerySet[EndpointHour]:
        return EndpointHour.objects.filter(endpoint__tenant=self.tenant)

    def endpoint(self, pk: int) -> Endpoint:
        return _one(self.endpoints(), "endpoint", pk=pk)

    def message(self, uid: str) -> Message:
        return _one(self.messages(), "message", uid=uid)

    def delivery(self, pk: int) -> Delivery:
        return _one(self.deliveries().select_related("message", "endpoint"), "delivery", pk=pk)

    def attempt(self, pk: int) -> Attempt:
        found = self.attempts().select_related("delivery__message", "delivery__endpoint")
        return _one(found, "attempt", pk=pk)


def _one(queryset: QuerySet[M], what: str, **lookup: Any) -> M:
    found = queryset.filter(**lookup).first()
    if found is None:
        raise not_found(what, next(iter(lookup.values())))
    return found
