"""Opening a portal link, and the OpenAPI document (the pages are in ``pages.py``)."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_outbox.portal import openapi, tenancy
from django_outbox.portal.problems import Problem
from django_outbox.webhooks import access

logger = logging.getLogger("django_outbox.portal")
#: What a browser is shown for a link that is no good, as a title and a sentence; the log
#: says why it is no good.
EXPIRED_LINK = (
    "This link has expired",
    "Links to these pages work for a short time only. Go back to the application and open "
    "its webhooks page again: that makes a new link.",
)
BAD_LINK = (
    "This link does not work",
    "It may have been cut short or changed when it was copied. Go back to the application "
    "and open its webhooks page again: that makes a new link.",
)


@never_cache
@require_GET
def open_link(request: HttpRequest, token: str) -> HttpResponse:
    """A ``webhooks.portal_url()`` link: start a portal session for its tenant, then go to
    the portal, so the token leaves the address bar (and the history, and Referer headers)."""
    try:
        tenant = access.tenant_of(token, access.LINK_SALT)
    except access.InvalidAccess as exc:
        logger.info("portal: a link was refused: %s", exc.detail)
        title, detail = EXPIRED_LINK if exc.expired else BAD_LINK
        problem = Problem("forbidden", detail, title=title)
        context = {"problem": problem, "signed_out": True}
        return render(request, "django_outbox/portal/problem.html", context, status=403)
    tenancy.open_session(request, tenant)
    response = HttpResponseRedirect(reverse(f"{access.NAMESPACE}:home"))
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_GET
def openapi_document(request: HttpRequest) -> HttpResponse:
    """The API's OpenAPI 3.1 document (docs/openapi.json, its server where it is mounted)."""
    server = reverse(f"{access.NAMESPACE}:openapi").removesuffix("/openapi.json")
    return JsonResponse(openapi.document(server))
