"""Who the tenant of a request is, and whether CSRF applies to it.

In this order: a bearer token (``Authorization: Bearer <token>``, made by
``webhooks.portal_token()``); a portal session, opened by a link that
``webhooks.portal_url()`` made; the host's own function of the request,
``OUTBOX["WEBHOOKS"]["PORTAL_TENANT"]``. A request that brings a token stands or falls by
it: a bad token is refused, never passed over for the session.

A bearer token is sent by code that chose to send it, never by a browser on its own, so
CSRF does not apply to it; a session or the host's function rests on cookies, so every
unsafe method must then carry the CSRF token.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.module_loading import import_string

from django_outbox import conf
from django_outbox.portal.problems import Problem
from django_outbox.webhooks import access

logger = logging.getLogger("django_outbox.portal")
#: What a request without a tenant is told: the tenant's people and scripts read it, so it
#: names nothing of the application's code (the log says which ways in were tried).
NOT_SIGNED_IN = (
    "Not signed in, or the session has ended: open the webhooks page from the application "
    "again, or send 'Authorization: Bearer <token>' with a token the application gave you."
)
#: The session key of a portal session: ``{"tenant": ..., "until": seconds since the epoch}``.
SESSION_KEY = "django_outbox_portal"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    #: The request proves who it is with cookies (a session): CSRF applies.
    by_cookie: bool


def caller(request: HttpRequest) -> Caller:
    """The tenant of ``request``; a 401 problem when none is given or the token is bad."""
    header = request.headers.get("Authorization", "")
    if header:
        return Caller(_bearer(header), by_cookie=False)
    session = getattr(request, "session", None)
    opened = session.get(SESSION_KEY) if session is not None else None
    if isinstance(opened, dict) and opened.get("until", 0) > time.time():
        return Caller(str(opened["tenant"]), by_cookie=True)
    path = conf.get().WEBHOOKS.PORTAL_TENANT
    if path:
        tenant = _host_function(path)(request)
        if tenant is not None and (not isinstance(tenant, str) or len(tenant) > 255):
            raise ImproperlyConfigured(
                f"OUTBOX['WEBHOOKS']['PORTAL_TENANT'] ({path}) returned {tenant!r}: it must "
                "return a tenant (a string of up to 255 characters, as endpoints have), or "
                "None for a request that has none."
            )
        if tenant:
            return Caller(tenant, by_cookie=True)
    logger.info(
        "portal: %s %s has no tenant: no Authorization header (webhooks.portal_token() makes "
        "a token), no portal session (a link from webhooks.portal_url() opens one)%s",
        request.method,
        request.path,
        f", and OUTBOX['WEBHOOKS']['PORTAL_TENANT'] ({path}) returned None" if path else "",
    )
    raise Problem(
        "unauthenticated",
        NOT_SIGNED_IN,
        headers={"WWW-Authenticate": 'Bearer realm="webhooks"'},
    )


def _bearer(header: str) -> str:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Problem(
            "unauthenticated",
            "The Authorization header must be 'Bearer <token>', with a token the application "
            "gave you.",
            headers={"WWW-Authenticate": 'Bearer realm="webhooks"'},
        )
    try:
        return access.tenant_of(token.strip(), access.TOKEN_SALT)
    except access.InvalidAccess as exc:
        logger.info("portal: a bearer token was refused: %s", exc.detail)
        raise Problem(
            "unauthenticated",
            str(exc),
            headers={"WWW-Authenticate": 'Bearer realm="webhooks", error="invalid_token"'},
        ) from None


def _host_function(path: str) -> Any:
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"OUTBOX['WEBHOOKS']['PORTAL_TENANT'] ({path}) cannot be imported: {exc}"
        ) from exc


def open_session(request: HttpRequest, tenant: str) -> None:
    """Start a portal session for ``tenant`` (a new session key: no fixation)."""
    session = getattr(request, "session", None)
    if session is None:
        raise ImproperlyConfigured(
            "Portal links need sessions: add 'django.contrib.sessions' to INSTALLED_APPS and "
            "its SessionMiddleware to MIDDLEWARE."
        )
    session.cycle_key()
    until = time.time() + conf.get().WEBHOOKS.PORTAL_SESSION_SECONDS
    session[SESSION_KEY] = {"tenant": tenant, "until": until}


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason  # the reason, not the failure view's page


def check_csrf(request: HttpRequest, caller: Caller) -> None:
    """A 403 problem for an unsafe request by cookie without its CSRF token."""
    if not caller.by_cookie or request.method in SAFE_METHODS:
        return
    check = _CsrfCheck(lambda request: None)  # type: ignore[arg-type]
    if "CSRF_COOKIE" not in request.META:  # the host runs no CsrfViewMiddleware
        check.process_request(request)
    reason = check.process_view(request, None, (), {})  # type: ignore[arg-type]
    if reason is not None:
        raise Problem(
            "forbidden",
            f"CSRF check failed ({reason}): a request signed in by cookie must send the "
            "CSRF token (the X-CSRFToken header, from the csrftoken cookie), or use "
            "'Authorization: Bearer <token>' instead.",
        )
