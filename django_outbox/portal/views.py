"""Opening a portal link, and the OpenAPI document (the pages are in ``pages.py``)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_outbox.portal import openapi, tenancy
from django_outbox.portal.problems import Problem
from django_outbox.webhooks import access


@never_cache
@require_GET
def open_link(request: HttpRequest, token: str) -> HttpResponse:
    """A ``webhooks.portal_url()`` link: start a portal session for its tenant, then go to
    the portal, so the token leaves the address bar (and the history, and Referer headers)."""
    try:
        tenant = access.tenant_of(token, access.LINK_SALT)
    except access.InvalidAccess as exc:
        return Problem("unauthenticated", str(exc)).response()
    tenancy.open_session(request, tenant)
    response = HttpResponseRedirect(reverse(f"{access.NAMESPACE}:home"))
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_GET
def openapi_document(request: HttpRequest) -> HttpResponse:
    """The API's OpenAPI 3.1 document (docs/openapi.json, its server where it is mounted)."""
    server = reverse(f"{access.NAMESPACE}:openapi").removesuffix("/openapi.json")
    return JsonResponse(openapi.document(server))
