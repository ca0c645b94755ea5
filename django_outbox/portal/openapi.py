"""The API's OpenAPI 3.1 document, built here and kept in ``docs/openapi.json``
(``tests/test_portal_api.py`` checks that the two are the same, and that every route and
method of ``urls.py`` is described).

Each shape's fields follow ``shapes.py``; responses list every problem a route can answer.

One module over 400 lines: the document is one tree, and each route's parameters, bodies
and answers are written beside the shapes they name, as the API's readers meet them.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django_outbox.models import DeliveryStatus, SignatureScheme
from django_outbox.portal.params import MAX_ID, MAX_PAGE_SIZE
from django_outbox.webhooks import headers
from django_outbox.webhooks.values import EVENT_TYPE, MAX_GRACE, PATTERN

VERSION = "1"
#: Where the test project (and docs/portal.md) mounts the portal.
SERVER = "/webhooks/api/v1"

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    kind = schema["type"]
    return {**schema, "type": [kind, "null"]}


TIME: Schema = {"type": "string", "format": "date-time"}
ID: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
EVENT: Schema = {"type": "string", "pattern": f"^{EVENT_TYPE.pattern}$"}


def _object(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    """An object with exactly these properties (``required``: all of them by default)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


ENDPOINT_FIELDS: dict[str, Schema] = {
    "url": {
        "type": "string",
        "description": "Where deliveries are sent: https:// (http:// only where the application "
        "allows it), to a public address.",
    },
    "description": {"type": "string"},
    "event_types": {
        "type": ["array", "null"],
        "items": {"type": "string", "pattern": f"^{PATTERN.pattern}$"},
        "description": "The event types it receives; '*' matches any run of characters. "
        "Empty or null: all.",
    },
    "rate_limit": {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "maximum": 10_000,
        "description": "Requests per second at most; null: no limit.",
    },
    "timeout": {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "maximum": 600,
        "description": "Seconds for a whole request (below the application's lease); null: "
        "the application's default.",
    },
    "headers": {
        "type": ["object", "null"],
        "maxProperties": headers.MAX_HEADERS,
        "additionalProperties": {"type": "string", "maxLength": headers.MAX_VALUE},
        "description": "Headers of its own sent with every request (names HTTP tokens; the "
        "webhook-* headers and the request's own, such as content-type, are reserved). null "
        "or {}: none.",
    },
    "signature_scheme": {
        "type": "string",
        "enum": list(SignatureScheme.values),
        "description": "v1: HMAC-SHA256 with a shared whsec_ secret; v1a: ed25519, verified "
        "with the endpoint's whpk_ public key. A change rotates into a new key of the scheme.",
    },
}

ENDPOINT: dict[str, Schema] = {
    "id": ID,
    "url": {"type": "string"},
    "description": {"type": "string"},
    "event_types": {"type": "array", "items": {"type": "string"}},
    "active": {"type": "boolean"},
    "disabled_reason": {"type": ["string", "null"]},
    "disabled_at": _nullable(TIME),
    "rate_limit": {"type": ["number", "null"]},
    "timeout": {"type": ["number", "null"]},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "signature_scheme": {"type": "string", "enum": list(SignatureScheme.values)},
    "public_key": {
        "type": ["string", "null"],
        "description": "v1a: the whpk_ public key receivers verify with (no secret); v1: null.",
    },
    "failing_since": _nullable(TIME),
    "consecutive_failures": {"type": "integer", "minimum": 0},
    "previous_secret_expires_at": _nullable(TIME),
    "created_at": TIME,
}
SECRET: Schema = {
    "type": "string",
    "pattern": "^whsec_",
    "description": "A v1 endpoint's new signing secret: shown here once, never in reads "
    "(a v1a endpoint's private key is never shown: receivers use its public_key).",
}
EVENT_TYPE_SHAPE: dict[str, Schema] = {
    "name": {"type": "string"},
    "description": {"type": "string"},
    "example": {"description": "An example payload (the envelope's data)."},
    "schema": {"description": "The payload's JSON Schema, or null when none is declared."},
}
MESSAGE: dict[str, Schema] = {
    "id": {"type": "string", "description": "The webhook-id header receivers get."},
    "event_type": {"type": "string"},
    "ordering_key": {"type": ["string", "null"]},
    "idempotency_key": {"type": ["string", "null"]},
    "created_at": TIME,
}
DELIVERY: dict[str, Schema] = {
    "id": ID,
    "message": {"type": "string"},
    "event_type": {"type": "string"},
    "endpoint": ID,
    "status": {"type": "string", "enum": list(DeliveryStatus.values)},
    "attempts": {"type": "integer", "minimum": 0},
    "next_attempt_at": _nullable(TIME),
    "last_attempt_at": _nullable(TIME),
    "resent_at": _nullable(TIME),
    "created_at": TIME,
}
ATTEMPT: dict[str, Schema] = {
    "id": ID,
    "delivery": ID,
    "number": {"type": "integer", "minimum": 0},
    "started_at": TIME,
    "duration": {"type": "number", "description": "Seconds."},
    "succeeded": {"type": "boolean"},
    "status_code": {"type": ["integer", "null"]},
    "error": {
        "oneOf": [
            {"type": "null"},
            _object({"class": {"type": "string"}, "message": {"type": "string"}}),
        ]
    },
}
EXCERPTS: dict[str, Schema] = {
    "request": _object(
        {
            "url": {"type": "string"},
            "body": {"type": "string", "description": "The first 4,096 characters sent."},
            "truncated": {"type": "boolean"},
        }
    ),
    "response": _object(
        {
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string", "description": "The first 4 KiB received."},
        }
    ),
}


def _page(item: str) -> Schema:
    return _object(
        {
            "data": {"type": "array", "items": _ref(item)},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "Pass as ?cursor= for the next page; null: this is the last.",
            },
        }
    )


SCHEMAS: dict[str, Schema] = {
    "Endpoint": _object(ENDPOINT),
    "EndpointWithSecret": _object({**ENDPOINT, "secret": SECRET}, list(ENDPOINT)),
    "EventType": _object(EVENT_TYPE_SHAPE),
    "EventTypes": _object({"data": {"type": "array", "items": _ref("EventType")}}),
    "EndpointCreate": _object(ENDPOINT_FIELDS, ["url"]),
    "EndpointUpdate": _object(ENDPOINT_FIELDS, []),
    "Message": _object(MESSAGE),
    "MessageWithPayload": _object({**MESSAGE, "payload": {}}),
    "MessageWithDeliveries": _object(
        {**MESSAGE, "payload": {}, "deliveries": {"type": "array", "items": _ref("Delivery")}}
    ),
    "Delivery": _object(DELIVERY),
    "Attempt": _object(ATTEMPT),
    "AttemptWithExcerpts": _object({**ATTEMPT, **EXCERPTS}),
    "EndpointPage": _page("Endpoint"),
    "MessagePage": _page("Message"),
    "DeliveryPage": _page("Delivery"),
    "AttemptPage": _page("Attempt"),
    "Rotation": _object(
        {
            "grace_seconds": {
                "type": "number",
                "minimum": 0,
                "maximum": MAX_GRACE.total_seconds(),
                "description": "How long the old secret keeps signing too (default: the "
                "application's, OUTBOX['WEBHOOKS']['ROTATION_GRACE_SECONDS']).",
            }
        },
        [],
    ),
    "Recovery": _object(
        {"since": {**TIME, "description": "Resend the failed deliveries created since."}}
    ),
    "Queued": _object({"queued": {"type": "integer", "minimum": 0}}),
    "Nothing": _object({}, []),
    "Problem": {
        "type": "object",
        "description": "RFC 9457 problem details.",
        "properties": {
            "type": {"type": "string", "pattern": "^urn:django-outbox:problem:"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "errors": {
                "type": "array",
                "items": _object({"field": {"type": "string"}, "detail": {"type": "string"}}),
            },
        },
        "required": ["type", "title", "status", "detail"],
        "additionalProperties": False,
    },
}

PROBLEMS = {
    400: "The query string or the body is malformed (the problem says which).",
    401: "No tenant: no token, or one expired or changed.",
    403: "A request signed in by cookie without its CSRF token.",
    404: "No such row among the tenant's.",
    409: "The row's state does not allow it (the problem says why).",
    415: "The body is not JSON.",
    422: "Fields that are not right: errors names each.",
    429: "Over the tenant's rate limit: Retry-After says when to try again.",
}


def _parameters(path: str, query: dict[str, Schema]) -> list[Schema]:
    found = []
    for name in ("endpoint_id", "delivery_id", "attempt_id", "message_id"):
        if "{" + name + "}" in path:
            schema = {"type": "string"} if name == "message_id" else ID
            found.append({"name": name, "in": "path", "required": True, "schema": schema})
    if query:
        query = {
            **query,
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": 50},
            "cursor": {"type": "string", "description": "A page's next_cursor."},
        }
    found += [{"name": name, "in": "query", "schema": schema} for name, schema in query.items()]
    return found


def _operation(
    path: str,
    method: str,
    summary: str,
    answer: tuple[int, str | None],
    *,
    body: str | None = None,
    query: dict[str, Schema] | None = None,
    problems: tuple[int, ...] = (),
) -> tuple[str, str, Schema]:
    status, shape = answer
    responses: dict[str, Any] = {}
    if shape is None:
        responses[str(status)] = {"description": summary}
    else:
        content = {"application/json": {"schema": _ref(shape)}}
        responses[str(status)] = {"description": summary, "content": content}
    unsafe = method != "get"
    kinds = {401, 429, *problems} | ({403, 415, 400} if unsafe else {400} if query else set())
    if "{" in path:
        kinds.add(404)
    for kind in sorted(kinds):
        problem: Schema = {
            "description": PROBLEMS[kind],
            "content": {"application/problem+json": {"schema": _ref("Problem")}},
        }
        if kind == 429:
            problem["headers"] = {"Retry-After": {"schema": {"type": "string"}, "required": True}}
        responses[str(kind)] = problem
    operation: Schema = {
        "operationId": method + "_" + re.sub(r"[^a-z_]+", "_", path.strip("/")).strip("_"),
        "summary": summary,
        "parameters": _parameters(path, query or {}),
        "responses": responses,
    }
    if unsafe and method != "delete":
        operation["requestBody"] = {
            "required": body == "EndpointCreate",
            "content": {"application/json": {"schema": _ref(body or "Nothing")}},
        }
    return path, method, operation


TIMES = {"since": TIME, "until": TIME}
ENDPOINT_PATH = "/endpoints/{endpoint_id}/"
DELIVERY_PATH = "/deliveries/{delivery_id}/"

OPERATIONS = [
    _operation(
        "/endpoints/",
        "get",
        "List the endpoints, newest first.",
        (200, "EndpointPage"),
        query={"active": {"type": "string", "enum": ["true", "false"]}},
    ),
    _operation(
        "/endpoints/",
        "post",
        "Create an endpoint; the answer shows a v1 endpoint's secret, once.",
        (201, "EndpointWithSecret"),
        body="EndpointCreate",
        problems=(422,),
    ),
    _operation(ENDPOINT_PATH, "get", "Read an endpoint.", (200, "Endpoint")),
    _operation(
        ENDPOINT_PATH,
        "patch",
        "Change some of an endpoint's fields (a new signature_scheme rotates into a new key: "
        "a v1 secret is shown, once).",
        (200, "EndpointWithSecret"),
        body="EndpointUpdate",
        problems=(422,),
    ),
    _operation(
        ENDPOINT_PATH,
        "delete",
        "Delete an endpoint, with its deliveries and attempts.",
        (204, None),
    ),
    _operation(
        ENDPOINT_PATH + "enable/",
        "post",
        "Enable an endpoint (its failure count starts again).",
        (200, "Endpoint"),
        problems=(422,),
    ),
    _operation(
        ENDPOINT_PATH + "disable/",
        "post",
        "Disable an endpoint: nothing more is sent to it until it is enabled.",
        (200, "Endpoint"),
        problems=(422,),
    ),
    _operation(
        ENDPOINT_PATH + "rotate-secret/",
        "post",
        "A new key (a v1 secret is shown, once); the old one keeps signing for the grace period.",
        (200, "EndpointWithSecret"),
        body="Rotation",
        problems=(422,),
    ),
    _operation(
        ENDPOINT_PATH + "test/",
        "post",
        "Send a webhook.test event to this endpoint alone.",
        (202, "MessageWithPayload"),
        problems=(409, 422),
    ),
    _operation(
        ENDPOINT_PATH + "recover/",
        "post",
        "Resend every failed delivery to this endpoint created since a time.",
        (202, "Queued"),
        body="Recovery",
        problems=(409, 422),
    ),
    _operation(
        "/event-types/",
        "get",
        "The event types the application sends, with an example and a schema each.",
        (200, "EventTypes"),
    ),
    _operation(
        "/messages/",
        "get",
        "List the messages, newest first.",
        (200, "MessagePage"),
        query={"event_type": EVENT, **TIMES},
    ),
    _operation(
        "/messages/{message_id}/",
        "get",
        "Read a message: its payload and its deliveries.",
        (200, "MessageWithDeliveries"),
    ),
    _operation(
        "/deliveries/",
        "get",
        "List the deliveries, newest first.",
        (200, "DeliveryPage"),
        query={
            "status": {"type": "string", "enum": list(DeliveryStatus.values)},
            "endpoint": ID,
            "event_type": EVENT,
            **TIMES,
        },
    ),
    _operation(DELIVERY_PATH, "get", "Read a delivery.", (200, "Delivery")),
    _operation(
        DELIVERY_PATH + "resend/",
        "post",
        "Send a delivery again now, as a new round of attempts.",
        (202, "Delivery"),
        problems=(409, 422),
    ),
    _operation(
        DELIVERY_PATH + "attempts/",
        "get",
        "List a delivery's attempts, newest first.",
        (200, "AttemptPage"),
        query={"status": {"type": "string", "enum": ["succeeded", "failed"]}},
    ),
    _operation(
        "/attempts/",
        "get",
        "List the attempts, newest first.",
        (200, "AttemptPage"),
        query={
            "status": {"type": "string", "enum": ["succeeded", "failed"]},
            "endpoint": ID,
            "delivery": ID,
            **TIMES,
        },
    ),
    _operation(
        "/attempts/{attempt_id}/",
        "get",
        "Read an attempt, with excerpts of its request and response.",
        (200, "AttemptWithExcerpts"),
    ),
]


def document(server: str = SERVER) -> dict[str, Any]:
    """The document, its server at ``server`` (where the API is mounted)."""
    paths: dict[str, dict[str, Any]] = {}
    for path, method, operation in OPERATIONS:
        paths.setdefault(path, {})[method] = copy.deepcopy(operation)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "django_outbox webhook portal API",
            "version": VERSION,
            "description": "A tenant's webhook endpoints, messages, deliveries and attempts. "
            "See docs/portal.md.",
        },
        "servers": [{"url": server}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": copy.deepcopy(SCHEMAS),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token from webhooks.portal_token(tenant). A portal "
                    "session (cookies, with CSRF) works too.",
                }
            },
        },
    }
