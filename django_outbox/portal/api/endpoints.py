"""Endpoints: list, create, read, update, delete, enable, disable, rotate the secret, send
a test event, recover failed deliveries. Each change goes through the webhooks' Python API,
as the admin's do."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import HttpRequest

from django_outbox import webhooks
from django_outbox.models import Endpoint
from django_outbox.portal import inputs, params, shapes
from django_outbox.portal.api.base import Answer
from django_outbox.portal.paging import page
from django_outbox.portal.problems import Problem
from django_outbox.portal.scoping import Scope

#: What ``disabled_reason`` says of an endpoint disabled in the portal.
DISABLED_IN_PORTAL = "in the portal"


def listed(request: HttpRequest, scope: Scope) -> Answer:
    query = params.parse(request, {"active": params.one_of(("true", "false"))})
    rows = scope.endpoints()
    if "active" in query:
        rows = rows.filter(active=query["active"] == "true")
    return Answer(page(scope, "endpoints", rows, query, shapes.endpoint))


def create(request: HttpRequest, scope: Scope) -> Answer:
    fields = inputs.endpoint_fields(request, creating=True)
    try:
        endpoint = webhooks.create_endpoint(tenant=scope.tenant, **fields)
    except ValidationError as exc:
        raise inputs.invalid({"url": " ".join(exc.messages)}) from None
    # A v1 secret is shown here, once: reads never show it.
    return Answer({**shapes.endpoint(endpoint), **shapes.secret_once(endpoint)}, status=201)


def read(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    return Answer(shapes.endpoint(scope.endpoint(endpoint_id)))


def update(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    endpoint = scope.endpoint(endpoint_id)
    fields = inputs.endpoint_fields(request, creating=False)
    scheme = endpoint.signature_scheme
    webhooks.update_endpoint(endpoint, **fields)
    if endpoint.signature_scheme != scheme:  # a rotation into the other scheme
        return Answer({**shapes.endpoint(endpoint), **shapes.secret_once(endpoint)})
    return Answer(shapes.endpoint(endpoint))


def delete(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    scope.endpoint(endpoint_id).delete()
    return Answer(status=204)


def enable(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    endpoint = scope.endpoint(endpoint_id)
    inputs.nothing(request)
    webhooks.enable(endpoint)
    return Answer(shapes.endpoint(endpoint))


def disable(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    endpoint = scope.endpoint(endpoint_id)
    inputs.nothing(request)
    webhooks.disable(endpoint, DISABLED_IN_PORTAL)
    return Answer(shapes.endpoint(endpoint))


def rotate_secret(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    endpoint = scope.endpoint(endpoint_id)
    webhooks.rotate_secret(endpoint, inputs.grace(request))
    # A new v1 secret is shown here, once (a v1a endpoint's new public key is in its shape).
    return Answer({**shapes.endpoint(endpoint), **shapes.secret_once(endpoint)})


def send_test(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    endpoint = scope.endpoint(endpoint_id)
    inputs.nothing(request)
    _deliverable(endpoint)
    message = webhooks.send_test(endpoint)
    return Answer(shapes.message(message, with_payload=True), status=202)


def recover(request: HttpRequest, scope: Scope, endpoint_id: int) -> Answer:
    endpoint = scope.endpoint(endpoint_id)
    since = inputs.since(request)
    _deliverable(endpoint)
    return Answer({"queued": webhooks.recover(endpoint, since)}, status=202)


def _deliverable(endpoint: Endpoint) -> None:
    if not endpoint.active:
        raise Problem(
            "conflict",
            f"Endpoint {endpoint.pk} is disabled ({endpoint.disabled_reason or 'by hand'}): "
            "enable it first.",
        )
