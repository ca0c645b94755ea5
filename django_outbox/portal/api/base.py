"""One URL of the API: its handlers by method, wrapped in what every call goes through.

In order: a browser's CORS preflight (portal/cors.py), the method (405 with ``Allow``),
the tenant (401), CSRF for callers by cookie
(403), the tenant's rate limit (429), then the handler, given the tenant's ``Scope``, in
the webhooks' database and one transaction. A ``Problem`` raised anywhere is the answer;
the transaction is rolled back with it, so a refused request changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.db import router, transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from django_outbox import conf
from django_outbox.db.routing import jobs_of
from django_outbox.models import Message
from django_outbox.portal import cors, limits, params, tenancy
from django_outbox.portal.problems import Problem, not_found
from django_outbox.portal.scoping import Scope

Handler = Callable[..., "Answer"]
View = Callable[..., HttpResponse]


class Answer:
    """A handler's answer: JSON and a status (204: no body)."""

    def __init__(self, data: Any = None, status: int = 200) -> None:
        self.data, self.status = data, status

    def response(self) -> HttpResponse:
        if self.status == 204:
            return HttpResponse(status=204)
        return HttpResponse(
            json.dumps(self.data), status=self.status, content_type="application/json"
        )


def route(**handlers: Handler) -> View:
    """The view of one URL: ``route(GET=read, PATCH=update)``; ``view.methods`` lists them."""
    methods = {name.upper(): handler for name, handler in handlers.items()}
    allowed = ", ".join(methods)

    @csrf_exempt  # tenancy.check_csrf applies it, to callers by cookie only
    @never_cache
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        return cors.answered(request, allowed, lambda: answer(request, **kwargs))

    def answer(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        try:
            handler = methods.get(request.method or "")
            if handler is None:
                raise Problem(
                    "method-not-allowed",
                    f"{request.method} is not allowed here: use {allowed}.",
                    headers={"Allow": allowed},
                )
            caller = tenancy.caller(request)
            tenancy.check_csrf(request, caller)
            limits.throttle(caller.tenant)
            kwargs = {name: _id(name, value) for name, value in kwargs.items()}
            # The second is entered after the first: the router then knows the database.
            with (
                jobs_of(conf.get().WEBHOOKS.BACKEND),
                transaction.atomic(using=router.db_for_write(Message)),
            ):
                return handler(request, Scope(caller.tenant), **kwargs).response()
        except Problem as problem:
            return problem.response()

    view.methods = tuple(methods)  # type: ignore[attr-defined]
    return view


#: The path's ids that are whole numbers (a message's id is its ``msg_…`` text).
WHOLE_IDS = {"endpoint_id": "endpoint", "delivery_id": "delivery", "attempt_id": "attempt"}


def _id(name: str, value: str) -> Any:
    if name not in WHOLE_IDS:
        return value
    try:
        return params.whole(value)
    except ValueError:
        raise not_found(WHOLE_IDS[name], repr(value)) from None
