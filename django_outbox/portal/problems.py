"""Errors as problem details (RFC 9457, ``application/problem+json``): a ``type``, a
``title``, the ``status``, a ``detail`` that says what was wrong and what to do, and, for
a body's fields, ``errors``: ``[{"field": "url", "detail": "..."}]``.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

CONTENT_TYPE = "application/problem+json"
#: Each kind of problem: its status and title. Its type is ``urn:django-outbox:problem:<kind>``.
KINDS: dict[str, tuple[int, str]] = {
    "bad-request": (400, "Bad request"),
    "unauthenticated": (401, "Not authenticated"),
    "forbidden": (403, "Forbidden"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "conflict": (409, "Conflict"),
    "unsupported-media-type": (415, "Unsupported media type"),
    "invalid": (422, "Invalid fields"),
    "rate-limited": (429, "Too many requests"),
}


def type_of(kind: str) -> str:
    return f"urn:django-outbox:problem:{kind}"


class Problem(Exception):
    """An answer that is an error: raised anywhere in a view, answered by the API's wrapper."""

    def __init__(
        self,
        kind: str,
        detail: str,
        *,
        errors: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        title: str = "",
    ) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail
        self.status, self.title = KINDS[kind]
        self.title = title or self.title
        self.errors = errors or {}
        self.headers = headers or {}

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": type_of(self.kind),
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.errors:
            body["errors"] = [
                {"field": field, "detail": detail} for field, detail in self.errors.items()
            ]
        return body

    def response(self) -> HttpResponse:
        response = HttpResponse(
            json.dumps(self.as_dict()), status=self.status, content_type=CONTENT_TYPE
        )
        for name, value in self.headers.items():
            response[name] = value
        return response


def not_found(what: str, given: object) -> Problem:
    return Problem(
        "not-found", f"There is no {what} {given} (among yours: each tenant sees its own)."
    )
