"""CORS for the tenant API: a browser page of an origin in
``OUTBOX["PORTAL"]["CORS_ORIGINS"]`` may call it with a bearer token; no other origin may.

A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from a listed origin is
answered 204 with the route's methods and the headers a call sends; from another origin,
403. An answer to a listed origin says ``Access-Control-Allow-Origin`` for it (and
``Vary: Origin``); credentials (the portal's session cookie) are never allowed across
origins, so a page elsewhere cannot act as a signed-in customer. A request from the
portal's own origin is not a cross-origin one and passes as before.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from django_outbox import conf
from django_outbox.portal.problems import Problem

#: The request headers a call to the API sends (Content-Type for a JSON body).
ALLOWED_HEADERS = "Authorization, Content-Type"
#: The answer's headers a page may read: when to try again.
EXPOSED_HEADERS = "Retry-After"
#: How long a browser may keep a preflight's answer.
MAX_AGE_SECONDS = 600


def answered(
    request: HttpRequest, methods: str, answer: Callable[[], HttpResponse]
) -> HttpResponse:
    """``answer()``, with the CORS headers its origin gets; or the preflight's answer."""
    origin = request.headers.get("Origin")
    if origin is None or _same_origin(request, origin):
        return answer()
    allowed = origin in conf.get().PORTAL.CORS_ORIGINS
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        if not allowed:
            return Problem(
                "forbidden",
                f"Pages of {origin} may not call this API: only the origins of "
                "OUTBOX['PORTAL']['CORS_ORIGINS'] may.",
            ).response()
        response = HttpResponse(status=204)
        response["Access-Control-Allow-Methods"] = methods
        response["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
        response["Access-Control-Max-Age"] = str(MAX_AGE_SECONDS)
    else:
        response = answer()
    if allowed:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
    _vary_on_origin(response)
    return response


def _same_origin(request: HttpRequest, origin: str) -> bool:
    return origin == f"{request.scheme}://{request.get_host()}"


def _vary_on_origin(response: HttpResponse) -> None:
    vary = [part.strip() for part in response.get("Vary", "").split(",") if part.strip()]
    if "Origin" not in vary:
        response["Vary"] = ", ".join([*vary, "Origin"])
