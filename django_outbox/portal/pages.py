"""The portal's pages: server-rendered HTML forms, no build step and no script needed,
for a tenant's people to do what the API does. Every row is reached through the tenant's
``Scope`` and every change made by the webhooks' Python API, as in the API's views.

Each page may be shown in an iframe by the origins of
``OUTBOX["WEBHOOKS"]["PORTAL_FRAME_ANCESTORS"]`` (``Content-Security-Policy:
frame-ancestors``); forms carry Django's CSRF token (``csrf_protect``, whatever the host's
middleware). Themes: override the template ``django_outbox/portal/theme.html``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.db import router, transaction
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect

from django_outbox import conf, webhooks
from django_outbox.db.routing import jobs_of
from django_outbox.models import DeliveryStatus, Endpoint, Message
from django_outbox.portal import forms, health, limits, shapes, tenancy
from django_outbox.portal.api.base import WHOLE_IDS
from django_outbox.portal.api.endpoints import DISABLED_IN_PORTAL
from django_outbox.portal.params import whole
from django_outbox.portal.problems import Problem, not_found
from django_outbox.portal.scoping import Scope
from django_outbox.webhooks.access import NAMESPACE

TEMPLATES = "django_outbox/portal/"
#: A page's answer to a visitor without a tenant (a browser: no word of tokens).
NOT_SIGNED_IN = (
    "You are not signed in to these pages, or your session has ended. Go back to the "
    "application and open its webhooks page again."
)
M = TypeVar("M", bound=Model)
#: The most endpoints the first page lists; the most deliveries, attempts and messages a
#: page lists (an "Older" link shows the next ones).
MAX_ENDPOINTS, MAX_DELIVERIES, MAX_ATTEMPTS, MAX_MESSAGES = 200, 50, 50, 50
#: What a ``?done=`` notice says after a change.
DONE = {
    "saved": "Saved.",
    "rescheme": "Saved. The signature scheme changed: a new key of it signs from now on.",
    "enabled": "Enabled: deliveries go to it again.",
    "disabled": "Disabled: nothing more is sent to it until it is enabled.",
    "tested": "A webhook.test event is on its way; its delivery is listed below.",
    "resent": "Sent again: a new round of attempts has started.",
    "deleted": "The endpoint was deleted.",
    "added": "The endpoint was added.",
    "rotated": "Rotated: a new key signs from now on.",
}
#: The session key that asks an endpoint's next page to show its new secret, once:
#: ``{"endpoint": pk, "rotated": bool, "until": seconds since the epoch}``. The secret
#: itself stays in the endpoint's row.
SHOW_SECRET = "django_outbox_portal_show_secret"
#: How long that mark waits for its redirect to be followed.
SHOW_SECRET_SECONDS = 300


def page(*methods: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A page's view: its methods, the tenant, CSRF, the tenant's rate limit (the API's),
    the ids, one transaction, problems shown as a page, and the frame-ancestors header."""

    def wrap(function: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_protect
        @never_cache
        def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            caller = None
            try:
                caller = tenancy.caller(request)
                if request.method not in methods:
                    raise Problem(
                        "method-not-allowed",
                        f"{request.method} is not allowed here: use {', '.join(methods)}.",
                        headers={"Allow": ", ".join(methods)},
                    )
                limits.throttle(caller.tenant)  # the API's bucket: one budget a tenant
                kwargs = {name: _id(name, value) for name, value in kwargs.items()}
                with (
                    jobs_of(conf.get().WEBHOOKS.BACKEND),
                    transaction.atomic(using=router.db_for_write(Message)),
                ):
                    response = function(request, Scope(caller.tenant), **kwargs)
            except Problem as problem:
                if problem.kind == "unauthenticated":
                    problem = Problem(  # the log has said why (tenancy)
                        "unauthenticated",
                        NOT_SIGNED_IN,
                        title="Not signed in",
                        headers=problem.headers,
                    )
                tenant = caller.tenant if caller is not None else None
                context = {"problem": problem, "tenant": tenant, "signed_out": caller is None}
                response = render(
                    request, TEMPLATES + "problem.html", context, status=problem.status
                )
                for name, value in problem.headers.items():
                    response[name] = value
            return framed(response)

        view.methods = methods  # type: ignore[attr-defined]
        return view

    return wrap


def framed(response: HttpResponse) -> HttpResponse:
    origins = conf.get().WEBHOOKS.PORTAL_FRAME_ANCESTORS
    response["Content-Security-Policy"] = "frame-ancestors " + " ".join(("'self'", *origins))
    if origins:
        response.xframe_options_exempt = True
    elif "X-Frame-Options" not in response:
        response["X-Frame-Options"] = "SAMEORIGIN"
    return response


def _id(name: str, value: str) -> Any:
    try:
        return whole(value) if name in WHOLE_IDS else value
    except ValueError:
        raise not_found(WHOLE_IDS[name], repr(value)) from None


def _to(name: str, *args: Any, done: str = "", status: int = 302, **query: Any) -> HttpResponse:
    url = reverse(f"{NAMESPACE}:{name}", args=args)
    given = urlencode({"done": done, **query} if done else query)
    response = HttpResponseRedirect(f"{url}?{given}" if given else url)
    response.status_code = status
    return response


def _context(request: HttpRequest, scope: Scope, **more: Any) -> dict[str, Any]:
    return {"tenant": scope.tenant, "done": DONE.get(request.GET.get("done", "")), **more}


@page("GET")
def home(request: HttpRequest, scope: Scope) -> HttpResponse:
    endpoints = list(scope.endpoints().order_by("-pk")[:MAX_ENDPOINTS])
    healths = health.of(scope, endpoints)
    rows = [(endpoint, healths[endpoint.pk]) for endpoint in endpoints]
    return render(request, TEMPLATES + "home.html", _context(request, scope, rows=rows))


@page("GET")
def event_types(request: HttpRequest, scope: Scope) -> HttpResponse:
    """The declared event types, each with its example and schema; none: a sentence."""
    listed = [
        (event_type, _pretty(event_type.example), _pretty(event_type.schema))
        for event_type in webhooks.event_types()
    ]
    context = _context(request, scope, event_types=listed)
    return render(request, TEMPLATES + "event_types.html", context)


def _pretty(value: Any) -> str | None:
    return None if value is None else json.dumps(value, indent=2, ensure_ascii=False)


def _form(form: dict[str, Any], scheme: str = "") -> dict[str, Any]:
    """The endpoint form's context: its values, the catalogue's checkboxes, the schemes
    (with ``scheme``, the endpoint's own)."""
    return {
        "form": form,
        "choices": forms.event_type_choices(form["picked"]),
        "schemes": forms.scheme_choices(scheme),
    }


@page("GET", "POST")
def endpoint_new(request: HttpRequest, scope: Scope) -> HttpResponse:
    if request.method == "GET":
        fresh = _form({"picked": [], "signature_scheme": "v1"})
        return render(request, TEMPLATES + "endpoint_new.html", _context(request, scope, **fresh))
    fields, errors = forms.endpoint_fields(request.POST)
    if errors:
        context = _context(request, scope, errors=errors, **_form(forms.sent(request.POST)))
        return render(request, TEMPLATES + "endpoint_new.html", context, status=422)
    endpoint = webhooks.create_endpoint(tenant=scope.tenant, **fields)
    # A v1 secret is shown once (a v1a endpoint's page shows its public key).
    return _show_new_key(request, scope, endpoint, rotated=False, done="added")


@page("GET", "POST")
def endpoint(request: HttpRequest, scope: Scope, endpoint_id: int) -> HttpResponse:
    found = scope.endpoint(endpoint_id)
    if request.method == "GET":
        return _endpoint_page(request, scope, found, **_new_key_shown(request, found))
    scheme = found.signature_scheme
    fields, errors = forms.endpoint_fields(request.POST, scheme=scheme)
    if errors:
        sent = _form(forms.sent(request.POST, scheme), scheme)
        return _endpoint_page(request, scope, found, errors=errors, status=422, **sent)
    webhooks.update_endpoint(found, **fields)
    if found.signature_scheme != scheme:
        # A rotation into the other scheme: a new v1 secret is shown once.
        return _show_new_key(request, scope, found, rotated=True, done="rescheme")
    return _to("page-endpoint", found.pk, done="saved")


def _show_new_key(
    request: HttpRequest, scope: Scope, endpoint: Endpoint, *, rotated: bool, done: str
) -> HttpResponse:
    """After a POST that made a key: redirect to the endpoint's page, which shows a new v1
    secret once (post/redirect/get: reloading that page repeats nothing). A caller
    without a session (a bearer token) gets the page at once, as the answer to its POST."""
    session = getattr(request, "session", None)
    if session is None or "Authorization" in request.headers:
        secret = shapes.secret_once(endpoint).get("secret")
        return _endpoint_page(
            request, scope, endpoint, secret=secret, rotated=rotated, done=DONE[done]
        )
    until = time.time() + SHOW_SECRET_SECONDS
    session[SHOW_SECRET] = {"endpoint": endpoint.pk, "rotated": rotated, "until": until}
    return _to("page-endpoint", endpoint.pk, done=done, status=303)


def _new_key_shown(request: HttpRequest, endpoint: Endpoint) -> dict[str, Any]:
    """The secret a redirect of ``_show_new_key`` asked this page to show, taken from the
    session so that it shows once."""
    session = getattr(request, "session", None)
    asked = session.get(SHOW_SECRET) if session is not None else None
    if not isinstance(asked, dict) or asked.get("endpoint") != endpoint.pk:
        return {}
    del session[SHOW_SECRET]  # type: ignore[union-attr]
    if asked.get("until", 0) < time.time():  # the redirect was not followed then
        return {}
    return {"secret": shapes.secret_once(endpoint).get("secret"), "rotated": asked["rotated"]}


def _endpoint_page(
    request: HttpRequest, scope: Scope, endpoint: Endpoint, *, status: int = 200, **more: Any
) -> HttpResponse:
    shown = request.GET.get("status", "")
    deliveries = _before(request, scope.deliveries().filter(endpoint=endpoint))
    if shown in DeliveryStatus.values:
        deliveries = deliveries.filter(status=shown)
    listed = list(deliveries.select_related("message").order_by("-pk")[: MAX_DELIVERIES + 1])
    if "form" not in more:
        more |= _form(forms.initial(endpoint), endpoint.signature_scheme)
    if "recovered" not in more and request.GET.get("recovered", "").isdigit():
        more["recovered"] = int(request.GET["recovered"])  # after recover's redirect
    context = _context(
        request,
        scope,
        endpoint=endpoint,
        scheme=forms.SCHEMES.get(endpoint.signature_scheme, endpoint.signature_scheme),
        # v1a: what the receiver verifies with, no secret; the whsk_ key is never shown.
        public_key=webhooks.public_key(endpoint),
        headers=forms.sorted_headers(endpoint.headers),
        health=health.of(scope, [endpoint])[endpoint.pk],
        failures=health.last_failures(scope, endpoint),
        deliveries=listed[:MAX_DELIVERIES],
        older=listed[MAX_DELIVERIES - 1].pk if len(listed) > MAX_DELIVERIES else None,
        statuses=DeliveryStatus.values,
        shown=shown,
        graces=forms.GRACES,
        **more,
    )
    return render(request, TEMPLATES + "endpoint.html", context, status=status)


def _before(request: HttpRequest, rows: QuerySet[M]) -> QuerySet[M]:
    """The rows older than ``?before=<id>``: a page's "Older" link (scoped rows only)."""
    try:
        return rows.filter(pk__lt=whole(request.GET.get("before", "")))
    except ValueError:
        return rows


@page("GET")
def messages(request: HttpRequest, scope: Scope) -> HttpResponse:
    event_type = request.GET.get("event_type", "")
    rows = _before(request, scope.messages())
    if event_type:
        rows = rows.filter(event_type=event_type)
    listed = list(rows.order_by("-pk")[: MAX_MESSAGES + 1])
    context = _context(
        request,
        scope,
        messages=listed[:MAX_MESSAGES],
        older=listed[MAX_MESSAGES - 1].pk if len(listed) > MAX_MESSAGES else None,
        event_type=event_type,
    )
    return render(request, TEMPLATES + "messages.html", context)


@page("GET")
def message(request: HttpRequest, scope: Scope, message_id: str) -> HttpResponse:
    found = scope.message(message_id)
    deliveries = scope.deliveries().filter(message=found).select_related("endpoint")
    context = _context(
        request,
        scope,
        message=found,
        payload=json.dumps(json.loads(found.body).get("data"), indent=2, ensure_ascii=False),
        deliveries=deliveries.order_by("pk"),
    )
    return render(request, TEMPLATES + "message.html", context)


def _action(function: Callable[[HttpRequest, Scope, Endpoint], HttpResponse]) -> Any:
    def act(request: HttpRequest, scope: Scope, endpoint_id: int) -> HttpResponse:
        return function(request, scope, scope.endpoint(endpoint_id))

    act.__name__ = function.__name__
    return page("POST")(act)


@_action
def enable(request: HttpRequest, scope: Scope, endpoint: Endpoint) -> HttpResponse:
    webhooks.enable(endpoint)
    return _to("page-endpoint", endpoint.pk, done="enabled")


@_action
def disable(request: HttpRequest, scope: Scope, endpoint: Endpoint) -> HttpResponse:
    webhooks.disable(endpoint, DISABLED_IN_PORTAL)
    return _to("page-endpoint", endpoint.pk, done="disabled")


@_action
def rotate_secret(request: HttpRequest, scope: Scope, endpoint: Endpoint) -> HttpResponse:
    webhooks.rotate_secret(endpoint, forms.grace(request.POST))
    return _show_new_key(request, scope, endpoint, rotated=True, done="rotated")


@_action
def send_test(request: HttpRequest, scope: Scope, endpoint: Endpoint) -> HttpResponse:
    _deliverable(endpoint)
    webhooks.send_test(endpoint)
    return _to("page-endpoint", endpoint.pk, done="tested")


@_action
def recover(request: HttpRequest, scope: Scope, endpoint: Endpoint) -> HttpResponse:
    _deliverable(endpoint)
    since = forms.since(request.POST)
    if since is None:
        errors = {"since": "Give a time from 1970 on, e.g. 2026-05-01T12:00 (UTC)."}
        return _endpoint_page(request, scope, endpoint, recover_errors=errors, status=422)
    queued = webhooks.recover(endpoint, since)
    return _to("page-endpoint", endpoint.pk, status=303, recovered=queued)


@_action
def delete(request: HttpRequest, scope: Scope, endpoint: Endpoint) -> HttpResponse:
    endpoint.delete()
    return _to("home", done="deleted")


def _deliverable(endpoint: Endpoint) -> None:
    if not endpoint.active:
        raise Problem(
            "conflict",
            f"This endpoint is disabled ({endpoint.disabled_reason or 'by hand'}): enable it "
            "first.",
        )


@page("GET", "POST")
def delivery(request: HttpRequest, scope: Scope, delivery_id: int) -> HttpResponse:
    found = scope.delivery(delivery_id)
    if request.method == "POST":
        if not webhooks.resend(found):
            raise Problem(
                "conflict",
                "This delivery is already queued or being sent: it is resent once that run "
                "ends, if it fails.",
            )
        return _to("page-delivery", found.pk, done="resent")
    attempts = scope.attempts().filter(delivery=found).order_by("-pk")[:MAX_ATTEMPTS]
    body = found.message.body
    context = _context(
        request,
        scope,
        delivery=found,
        attempts=attempts,
        request_body=body[: shapes.REQUEST_EXCERPT],
        truncated=len(body) > shapes.REQUEST_EXCERPT,
    )
    return render(request, TEMPLATES + "delivery.html", context)
