"""What a request's body may hold: a JSON object whose fields are checked by type here, and
by value where the webhooks' Python API checks them (``webhooks.endpoints.endpoint_problems``),
so the portal and ``create_endpoint()`` refuse the same values. Every refusal is a problem
that names the fields; nothing is written before the whole body is good.

An endpoint's fields are declared once, in ``ENDPOINT``: create and update both read them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from django_outbox.portal.params import moment
from django_outbox.portal.problems import Problem
from django_outbox.webhooks import endpoints, values

logger = logging.getLogger("django_outbox.portal")


@dataclass(frozen=True, slots=True)
class Field:
    types: tuple[type, ...]
    #: What it must be, after "must be".
    says: str

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool):
            return bool in self.types
        return isinstance(value, self.types)


NUMBER = (int, float)
NONE = type(None)

#: An endpoint's fields, as create (``url`` required) and update take them.
ENDPOINT = {
    "url": Field((str,), "a string: the https:// URL deliveries are sent to"),
    "description": Field((str,), "a string"),
    "event_types": Field(
        (list, NONE), "a list of event types ('invoice.*' matches many), or null for all"
    ),
    "rate_limit": Field((*NUMBER, NONE), "a number of requests per second, or null for none"),
    "timeout": Field((*NUMBER, NONE), "a number of seconds, or null for the default"),
    "headers": Field((dict, NONE), "an object of header names to values, or null for none"),
    "signature_scheme": Field(
        (str,), "'v1' (HMAC with a whsec_ secret) or 'v1a' (ed25519, a whpk_ public key)"
    ),
}


def json_object(request: HttpRequest) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}``."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise Problem(
            "bad-request", "The body is too large (over DATA_UPLOAD_MAX_MEMORY_SIZE)."
        ) from None
    if not raw.strip():
        return {}
    kind = request.content_type or ""
    if kind != "application/json" and not kind.endswith("+json"):
        raise Problem(
            "unsupported-media-type",
            f"The body must be JSON, sent as 'Content-Type: application/json', not {kind!r}.",
        )
    try:
        found = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Problem("bad-request", f"The body is not valid JSON: {exc}.") from None
    if not isinstance(found, dict):
        raise Problem("bad-request", f"The body must be a JSON object, not {type(found).__name__}.")
    return found


def checked(body: dict[str, Any], fields: dict[str, Field], required: tuple[str, ...] = ()):
    """``body``'s fields, each of ``fields`` and of the type it declares; a 422 problem
    naming every field that is unknown, missing or of the wrong type."""
    errors = {
        name: f"Not a field here (the fields are {', '.join(fields)})."
        for name in body
        if name not in fields
    }
    errors |= {name: "Required." for name in required if name not in body}
    for name, value in body.items():
        if name in fields and not fields[name].accepts(value):
            errors[name] = f"Must be {fields[name].says}, not {json.dumps(value)[:80]}."
    if errors:
        raise invalid(errors)
    return body


def invalid(errors: dict[str, str]) -> Problem:
    named = ", ".join(errors)
    return Problem(
        "invalid",
        f"Nothing was changed: {'this field is' if len(errors) == 1 else 'these fields are'} "
        f"not right: {named}. See errors.",
        errors=errors,
    )


def endpoint_fields(request: HttpRequest, *, creating: bool) -> dict[str, Any]:
    """An endpoint's fields from the body, good to create or update it with."""
    fields = checked(json_object(request), ENDPOINT, ("url",) if creating else ())
    problems = endpoint_problems(fields)
    if problems:
        raise invalid(problems)
    return fields


def endpoint_problems(fields: dict[str, Any]) -> dict[str, str]:
    """``endpoints.endpoint_problems`` in the customers' terms (no setting of the application's
    named); a refused URL's full message, which says which setting would allow it, goes to
    the log for the application's developers."""
    problems = endpoints.endpoint_problems(for_customers=True, **fields)
    if "url" in problems:
        logger.info(
            "portal: an endpoint URL was refused: %s",
            endpoints.endpoint_problems(url=fields["url"]).get("url", problems["url"]),
        )
    return problems


def grace(request: HttpRequest) -> timedelta | None:
    """``{"grace_seconds": n}``: how long the old secret keeps signing (absent: the default)."""
    rule = Field(NUMBER, f"a number of seconds from 0 to {values.MAX_GRACE.days * 86400}")
    body = checked(json_object(request), {"grace_seconds": rule})
    if "grace_seconds" not in body:
        return None
    seconds = body["grace_seconds"]
    if not 0 <= seconds <= values.MAX_GRACE.total_seconds():
        raise invalid({"grace_seconds": f"Must be {rule.says}, not {seconds!r}."})
    return timedelta(seconds=seconds)


def since(request: HttpRequest) -> Any:
    """``{"since": "2026-05-01T12:00:00Z"}``, required."""
    body = checked(json_object(request), {"since": Field((str,), "an ISO 8601 time")}, ("since",))
    try:
        return moment(body["since"])
    except ValueError as exc:
        raise invalid({"since": str(exc)}) from None


def nothing(request: HttpRequest) -> None:
    """An action that takes no fields: an empty body or ``{}``."""
    checked(json_object(request), {})
