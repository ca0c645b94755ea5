"""A client for the portal's API as a tenant sees it: a bearer token, JSON in and out."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from django_outbox import webhooks

BASE = "/webhooks/api/v1"


class Api:
    """Calls ``/webhooks/api/v1/<path>`` as ``tenant`` (a fresh bearer token)."""

    def __init__(self, tenant: str, client: Client | None = None) -> None:
        self.tenant = tenant
        self.client = client or Client()
        self.token = webhooks.portal_token(tenant)

    def call(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", **options.pop("headers", {})}
        if body is not None and "content_type" not in options:
            options["content_type"] = "application/json"
            body = json.dumps(body)
        send = getattr(self.client, method.lower())
        if body is not None:
            options["data"] = body
        elif method in ("POST", "PATCH", "PUT"):  # no body at all, as curl -X POST sends
            options.setdefault("data", "")
            options.setdefault("content_type", "application/json")
        url = path if path.startswith("/") else f"{BASE}/{path}"  # "/…": the portal's pages
        return send(url, headers=headers, **options)

    def get(self, path: str, **query: Any) -> Any:
        return self.call("GET", path, data=query) if query else self.call("GET", path)

    def post(self, path: str, body: Any = None, **options: Any) -> Any:
        return self.call("POST", path, body, **options)

    def patch(self, path: str, body: Any = None, **options: Any) -> Any:
        return self.call("PATCH", path, body, **options)

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path)


def problem(response: Any, status: int) -> dict[str, Any]:
    """The problem details of ``response``, which must have ``status``."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["type"].startswith("urn:django-outbox:problem:")
    assert body["title"] and body["detail"]
    return body


def tenant_for(request: Any) -> str | None:
    """OUTBOX["WEBHOOKS"]["PORTAL_TENANT"] in the tests: a signed-in user's name."""
    user = getattr(request, "user", None)
    return user.username if user is not None and user.is_authenticated else None


def wrong_tenant_for(request: Any) -> Any:
    return 42
