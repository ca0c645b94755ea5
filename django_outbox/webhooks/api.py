"""What an application calls: endpoints, ``send()``, and the operations on deliveries.

Everything here runs in the caller's transaction: a rollback sends nothing.

One module of over 400 lines because it is the webhooks' public surface: each function
checks its input the same way (the shared validators below) and runs in the webhooks'
database (``_in_webhooks_database``); split, the checks and the routing would drift apart.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, router, transaction
from django.utils import timezone

from django_outbox import conf
from django_outbox.db.routing import jobs_of
from django_outbox.jobs import dedup
from django_outbox.jobs.jsonvalues import storable_problem
from django_outbox.jobs.results import resolve_task
from django_outbox.lib import text
from django_outbox.models import (
    Delivery,
    DeliveryStatus,
    Endpoint,
    Message,
    SignatureScheme,
)
from django_outbox.task import OutboxTask
from django_outbox.webhooks import catalogue, fanout, guard, signing
from django_outbox.webhooks import headers as endpoint_headers

#: Event types: letters, digits and ``_ . : -``, e.g. "invoice.paid".
EVENT_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
#: Filters may also use ``*``, which matches any run of characters: "invoice.*".
PATTERN = re.compile(r"[A-Za-z0-9_.:*-]{1,255}")
MAX_TIMEOUT = 600.0
TEST_EVENT = "webhook.test"
MAX_ORDERING_KEY = 200
DELIVER_TASK = "django_outbox.webhooks.tasks.deliver"


def _using() -> str:
    return router.db_for_write(Message)


_F = TypeVar("_F", bound=Callable[..., Any])


def _in_webhooks_database(function: _F) -> _F:
    """Run ``function`` with django_outbox's models in the database of the webhooks'
    TASKS alias (``OUTBOX["WEBHOOKS"]["BACKEND"]``; see db/routing.py)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with jobs_of(conf.get().WEBHOOKS.BACKEND):
            return function(*args, **kwargs)

    return cast(_F, wrapper)


def _text(name: str, value: Any, allow_empty: bool = True) -> str:
    if not isinstance(value, str) or len(value) > 255 or (not value and not allow_empty):
        wanted = "a string of up to 255 characters" + ("" if allow_empty else ", not empty")
        raise ValidationError(f"{name} must be {wanted}, not {value!r}.")
    return value


def _patterns(event_types: Iterable[str] | None) -> list[str]:
    if event_types is None:
        return []
    if isinstance(event_types, str):
        raise ValidationError(
            f"event_types must be a list of event types, not the string {event_types!r}."
        )
    patterns = list(event_types)
    for pattern in patterns:
        if not isinstance(pattern, str) or not PATTERN.fullmatch(pattern):
            raise ValidationError(
                f"{pattern!r} is not an event type filter: use letters, digits, '_ . : -' and"
                " '*' (any run of characters), e.g. 'invoice.*'."
            )
    return patterns


def _filters(event_types: Iterable[str] | None) -> list[str]:
    """An endpoint's filters, checked against the catalogue when one is declared."""
    patterns = _patterns(event_types)
    catalogue.check_patterns(patterns)
    return patterns


def signature_schemes() -> list[str]:
    """The signature schemes an endpoint may use here: "v1", and "v1a" where the
    cryptography package is installed."""
    return ["v1", "v1a"] if signing.ed25519_available() else ["v1"]


def _scheme(scheme: str) -> str:
    if scheme not in SignatureScheme.values:
        raise ValidationError(
            f"signature_scheme must be one of {', '.join(SignatureScheme.values)}, not {scheme!r}."
        )
    if scheme == SignatureScheme.V1A and not signing.ed25519_available():
        raise ValidationError(
            "The signature scheme 'v1a' (ed25519) needs the cryptography package, which is not "
            f"installed here: {signing.ED25519_INSTALL}."
        )
    return str(scheme)


def _key(secret: str | None, scheme: str) -> str:
    """The key an endpoint signs with: ``secret`` checked for ``scheme``, or a new one."""
    if secret is None:
        return signing.generate_key(scheme)
    try:
        signing.check_key(secret, scheme)
    except (signing.InvalidSecret, signing.SchemeUnavailable) as exc:
        raise ValidationError(str(exc)) from None
    return secret


def _description(description: str) -> str:
    if not isinstance(description, str):
        raise ValidationError(f"description must be a string, not {description!r}.")
    return description


def _timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    lease = conf.get().LEASE_SECONDS
    limit = min(MAX_TIMEOUT, lease)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < limit:
        why = (
            "the most a request may take"
            if limit < lease
            else "OUTBOX['LEASE_SECONDS'], so a lease outlasts its request"
        )
        raise ValidationError(
            f"timeout must be a number of seconds above 0 and below {text.number(limit)} "
            f"({why}), not {timeout!r}."
        )
    return float(timeout)


def _rate_limit(rate_limit: float | None) -> float | None:
    if rate_limit is None:
        return None
    if (
        isinstance(rate_limit, bool)
        or not isinstance(rate_limit, int | float)
        or not 0 < rate_limit <= conf.MAX_RATE
    ):
        raise ValidationError(
            f"rate_limit must be a number of requests per second above 0 and at most "
            f"{text.number(conf.MAX_RATE)}, or None for no limit, not {rate_limit!r}."
        )
    return float(rate_limit)


@_in_webhooks_database
def create_endpoint(
    url: str,
    *,
    event_types: Iterable[str] | None = None,
    tenant: str = "",
    description: str = "",
    timeout: float | None = None,
    secret: str | None = None,
    rate_limit: float | None = None,
    headers: dict[str, str] | None = None,
    signature_scheme: str = SignatureScheme.V1,
) -> Endpoint:
    """A new active endpoint; ``verification_key(endpoint)`` is what its owner verifies
    with (for v1, ``endpoint.secret`` itself: show it once).

    ``rate_limit``: requests per second at most, shared by every worker (None: no limit).
    ``headers``: headers of its own sent with every request (webhooks/headers.py).
    ``signature_scheme``: "v1" (HMAC, a shared ``whsec_`` secret) or "v1a" (ed25519: it
    signs with a ``whsk_`` key, its owner verifies with the ``whpk_`` public key).
    ValidationError for a URL that is not http(s) or that names a non-public address, and
    for any other bad value; nothing is stored then.
    """
    guard.check_url(url)
    scheme = _scheme(signature_scheme)
    key = _key(secret, scheme)
    return Endpoint.objects.create(
        url=url,
        event_types=_filters(event_types),
        tenant=_text("tenant", tenant),
        description=_description(description),
        timeout=_timeout(timeout),
        secret=key,
        signature_scheme=scheme,
        rate_limit=_rate_limit(rate_limit),
        headers=endpoint_headers.clean(headers),
    )


class _Keep:
    """An ``update_endpoint()`` argument not given: the value stays as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


@_in_webhooks_database
def update_endpoint(
    endpoint: Endpoint,
    *,
    url: str = KEEP,
    event_types: Iterable[str] | None = KEEP,
    description: str = KEEP,
    timeout: float | None = KEEP,
    rate_limit: float | None = KEEP,
    headers: dict[str, str] | None = KEEP,
    signature_scheme: str = KEEP,
    grace: timedelta | None = None,
) -> Endpoint:
    """Change what is given of ``endpoint``, checked as ``create_endpoint()`` checks it;
    a bad value raises ValidationError and changes nothing.

    A new ``signature_scheme`` is a rotation into it: a new key of that scheme signs from
    now on, and the old one (of the old scheme) signs too for ``grace`` (default
    ``ROTATION_GRACE_SECONDS``), so the receiver can switch over; show it
    ``verification_key(endpoint)``. The tenant and the secret are not changed here
    (``rotate_secret()`` changes the secret).
    """
    changes: dict[str, Any] = {}
    if url is not KEEP:
        guard.check_url(url)
        changes["url"] = url
    if event_types is not KEEP:
        changes["event_types"] = _filters(event_types)
    if description is not KEEP:
        changes["description"] = _description(description)
    if timeout is not KEEP:
        changes["timeout"] = _timeout(timeout)
    if rate_limit is not KEEP:
        changes["rate_limit"] = _rate_limit(rate_limit)
    if headers is not KEEP:
        changes["headers"] = endpoint_headers.clean(headers)
    if signature_scheme is not KEEP and signature_scheme != endpoint.signature_scheme:
        changes["signature_scheme"] = _scheme(signature_scheme)
        grace = _grace(grace)
        changes["previous_secret"] = endpoint.secret
        changes["previous_secret_expires_at"] = timezone.now() + grace
        changes["secret"] = signing.generate_key(changes["signature_scheme"])
    for name, value in changes.items():
        setattr(endpoint, name, value)
    if changes:
        endpoint.save(update_fields=list(changes))
    return endpoint


def public_key(endpoint: Endpoint) -> str | None:
    """The ``whpk_`` public key of a v1a endpoint (no secret: show it any time), or None
    for a v1 endpoint, whose receiver holds the shared secret instead."""
    if signing.scheme_of(endpoint.secret) != "v1a":
        return None
    return signing.public_key(endpoint.secret)


def verification_key(endpoint: Endpoint) -> str:
    """What the endpoint's receiver verifies with: the ``whsec_`` secret of a v1 endpoint
    (a secret: show it once), the ``whpk_`` public key of a v1a one."""
    return signing.verification_key(endpoint.secret)


def envelope(event_type: str, payload: Any, at: datetime) -> str:
    """The exact body sent and signed: ``{"type", "timestamp", "data"}`` as compact JSON."""
    problem = storable_problem(payload)
    if problem is not None:
        raise ValidationError(f"The payload of {event_type!r} cannot be sent as JSON: {problem}")
    stamp = at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    body = json.dumps(
        {"type": event_type, "timestamp": stamp, "data": payload},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    limit = conf.get().WEBHOOKS.MAX_PAYLOAD_BYTES
    size = len(body.encode("utf-8"))
    if size > limit:
        raise ValidationError(
            f"The payload of {event_type!r} is {size:,} bytes as sent, over "
            f"OUTBOX['WEBHOOKS']['MAX_PAYLOAD_BYTES'] ({limit:,} bytes). Send a smaller event (an "
            "id the receiver can fetch the rest with)."
        )
    return body


@_in_webhooks_database
def send(
    event_type: str,
    payload: Any,
    *,
    tenant: str = "",
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
) -> Message:
    """Send ``payload`` to every active endpoint of ``tenant`` whose filter matches.

    In the caller's transaction: a rollback sends nothing, and a database error in it
    leaves that transaction to be rolled back (as a failed ``save()`` does). A repeated
    ``idempotency_key`` (per tenant) returns the message it sent first and sends nothing
    new. The statements it runs do not grow with the number of endpoints.

    ``ordering_key``: messages with the same key reach each endpoint in the order they
    were sent; a delivery being retried holds back the later ones of its key to its
    endpoint, and nothing else.
    """
    if not isinstance(event_type, str) or not EVENT_TYPE.fullmatch(event_type):
        raise ValidationError(
            f"{event_type!r} is not an event type: use 1 to 255 letters, digits and "
            "'_ . : -', e.g. 'invoice.paid'."
        )
    catalogue.check_event_type(event_type)
    tenant = _text("tenant", tenant)
    if idempotency_key is not None:
        _text("idempotency_key", idempotency_key, allow_empty=False)
    if ordering_key is not None and (
        not isinstance(ordering_key, str) or not 0 < len(ordering_key) <= MAX_ORDERING_KEY
    ):
        raise ValidationError(
            f"ordering_key must be a string of 1 to {MAX_ORDERING_KEY} characters, or None "
            f"for no order, not {ordering_key!r}."
        )
    now = timezone.now()
    body = envelope(event_type, payload, now)
    if catalogue.validating():
        # The data as it is sent (JSON values), not as it was given.
        catalogue.validate_payload(event_type, json.loads(body)["data"])
    using = _using()
    # All or nothing without a savepoint of its own, as Django's bulk_create() and
    # multi-table save(): inside the caller's transaction a failure marks that transaction
    # for rollback, and a send costs no SAVEPOINT and RELEASE round trips.
    with transaction.atomic(using=using, savepoint=False):
        if idempotency_key is not None:
            found = Message.objects.using(using).filter(
                tenant=tenant, idempotency_key=idempotency_key
            )
            if existing := found.first():
                return existing
        message = Message(
            uid=new_message_id(),
            event_type=event_type,
            tenant=tenant,
            body=body,
            idempotency_key=idempotency_key,
            ordering_key=ordering_key,
            created_at=now,
        )
        if idempotency_key is None:
            message.save(using=using, force_insert=True)
        else:
            try:
                with transaction.atomic(using=using):
                    message.save(using=using, force_insert=True)
            except IntegrityError:
                # Sent a moment ago by a concurrent transaction: that message it is.
                if existing := found.first():
                    return existing
                raise
        fan_out(message, now, fresh=True)
    return message


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def fan_out(
    message: Message, now: datetime, endpoint_ids: list[int] | None = None, fresh: bool = False
) -> int:
    """Deliveries of ``message`` and their jobs, then a wake-up on commit. ``fresh``: the
    message was written by this transaction, so it has no deliveries yet."""
    using = _using()
    created = fanout.insert_deliveries(
        using, message.pk, message.event_type, message.tenant, now, endpoint_ids
    )
    if created:
        enqueue_delivery_jobs(message.pk, now, endpoint_ids, message.ordering_key, fresh)
    return created


def enqueue_delivery_jobs(
    message_id: int,
    now: datetime,
    endpoint_ids: list[int] | None = None,
    ordering_key: str | None = None,
    fresh: bool = False,
) -> int:
    options = conf.get().WEBHOOKS
    deliver = resolve_task(DELIVER_TASK)
    if not isinstance(deliver, OutboxTask):  # its backend is not django_outbox's
        raise ImproperlyConfigured(
            f"OUTBOX['WEBHOOKS']['BACKEND'] ({options.BACKEND!r}) must be a TASKS alias of "
            "django_outbox.backend.OutboxBackend: webhook deliveries are its jobs."
        )
    task = deliver.using(
        backend=options.BACKEND,
        queue_name=options.QUEUE,
        # The delivery's schedule decides when it has failed; the job's own limit only
        # stops a delivery whose worker keeps dying from running for ever.
        max_attempts=2 * len(options.RETRY_SCHEDULE) + 2,
    )
    return fanout.insert_jobs(_using(), task, message_id, now, endpoint_ids, ordering_key, fresh)


# -- operations (the admin exposes them) ---------------------------------------------------


@_in_webhooks_database
def resend(delivery: Delivery) -> bool:
    """Send a delivery again now, whatever its status, as a new round of attempts (numbered
    from 1, with the whole retry schedule). Returns False, changing nothing, while it
    already has a job queued or running (a delivery never has two)."""
    now = timezone.now()
    using = _using()
    with transaction.atomic(using=using):
        if _has_active_job(delivery.pk):
            return False
        Delivery.objects.filter(pk=delivery.pk).update(
            status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=now, resent_at=now
        )
        try:
            with transaction.atomic(using=using):
                queued = enqueue_delivery_jobs(
                    delivery.message_id,
                    now,
                    [delivery.endpoint_id],
                    # Behind the deliveries of its key sent since, to this endpoint.
                    Message.objects.filter(pk=delivery.message_id)
                    .values_list("ordering_key", flat=True)
                    .first(),
                )
        except IntegrityError:  # a concurrent resend queued its job a moment ago
            return False
    return queued > 0


def _has_active_job(delivery_id: int) -> bool:
    return dedup.active_with_keys(_using(), [f"{fanout.DEDUP_PREFIX}{delivery_id}"]).exists()


@_in_webhooks_database
def recover(endpoint: Endpoint, since: datetime) -> int:
    """Resend every failed delivery to ``endpoint`` created since ``since``; returns how
    many were queued."""
    _deliverable(endpoint)
    failed = Delivery.objects.filter(
        endpoint=endpoint, status=DeliveryStatus.FAILED, created_at__gte=since
    ).order_by("pk")
    return sum(resend(delivery) for delivery in failed)


@_in_webhooks_database
def replay(message: Message, endpoint: Endpoint) -> Delivery:
    """Deliver ``message`` to ``endpoint``, again or for the first time. The endpoint must
    be active and belong to the message's tenant."""
    _deliverable(endpoint)
    if endpoint.tenant != message.tenant:
        raise ValidationError(
            f"Endpoint {endpoint.pk} belongs to tenant {endpoint.tenant!r}, message "
            f"{message.uid} to {message.tenant!r}: a message goes to its own tenant only."
        )
    with transaction.atomic(using=_using()):
        delivery = Delivery.objects.filter(message=message, endpoint=endpoint).first()
        if delivery is None:
            fan_out(message, timezone.now(), [endpoint.pk])
            return Delivery.objects.get(message=message, endpoint=endpoint)
        resend(delivery)
        delivery.refresh_from_db()
        return delivery


def _deliverable(endpoint: Endpoint) -> None:
    if not Endpoint.objects.filter(pk=endpoint.pk, active=True).exists():
        raise ValidationError(
            f"Endpoint {endpoint.pk} is disabled ({endpoint.disabled_reason or 'by hand'}): "
            "enable() it first."
        )


@_in_webhooks_database
def send_test(endpoint: Endpoint, payload: Any = None) -> Message:
    """A ``webhook.test`` event to this endpoint alone, whatever its filter."""
    _deliverable(endpoint)
    now = timezone.now()
    data = payload if payload is not None else {"endpoint": endpoint.pk, "test": True}
    with transaction.atomic(using=_using()):
        message = Message.objects.create(
            uid=new_message_id(),
            event_type=TEST_EVENT,
            tenant=endpoint.tenant,
            body=envelope(TEST_EVENT, data, now),
            created_at=now,
        )
        fan_out(message, now, [endpoint.pk], fresh=True)
    return message


@_in_webhooks_database
def enable(endpoint: Endpoint) -> None:
    endpoint.active, endpoint.disabled_reason, endpoint.disabled_at = True, "", None
    endpoint.failing_since, endpoint.consecutive_failures = None, 0
    endpoint.save(
        update_fields=[
            "active",
            "disabled_reason",
            "disabled_at",
            "failing_since",
            "consecutive_failures",
        ]
    )


@_in_webhooks_database
def set_rate_limit(endpoint: Endpoint, rate_limit: float | None) -> None:
    """At most ``rate_limit`` requests per second to ``endpoint`` from now on (None: no
    limit). Deliveries over it wait for their turn: they are not failed."""
    endpoint.rate_limit = _rate_limit(rate_limit)
    endpoint.save(update_fields=["rate_limit"])


#: What ``update_endpoint()`` may change, and what ``endpoint_problems()`` checks.
ENDPOINT_FIELDS = (
    "url",
    "description",
    "event_types",
    "timeout",
    "rate_limit",
    "headers",
    "signature_scheme",
)


def endpoint_problems(*, for_customers: bool = False, **fields: Any) -> dict[str, str]:
    """What is wrong with each of these endpoint fields, by name (empty: nothing is).

    The one place an endpoint's fields are checked, field by field, so that the portal
    can say which field was wrong; ``create_endpoint()`` and ``update_endpoint()`` refuse
    the same values. ``for_customers``: the portal's messages, which name no setting of
    the application's (its log has the full ones)."""
    checks: dict[str, Callable[[Any], object]] = {
        "url": functools.partial(guard.check_url, for_customers=for_customers),
        "description": _description,
        "event_types": _filters,
        "timeout": _timeout,
        "rate_limit": _rate_limit,
        "headers": endpoint_headers.clean,
        "signature_scheme": _scheme,
    }
    found = {}
    for name, value in fields.items():
        if name not in checks:
            found[name] = f"{name!r} is not a field of an endpoint ({', '.join(checks)})."
            continue
        try:
            checks[name](value)
        except ValidationError as exc:
            found[name] = " ".join(exc.messages)
    return found


@_in_webhooks_database
def disable(endpoint: Endpoint, reason: str = "by hand") -> None:
    """Send nothing more to ``endpoint`` until it is enabled. ``reason`` reads after
    "disabled: " ("by hand", "in the admin by alice")."""
    endpoint.active, endpoint.disabled_reason = False, reason[:255]
    endpoint.disabled_at = timezone.now()
    endpoint.save(update_fields=["active", "disabled_reason", "disabled_at"])


#: The longest a rotated-out secret may keep signing.
MAX_GRACE = timedelta(days=366)


@_in_webhooks_database
def rotate_secret(endpoint: Endpoint, grace: timedelta | None = None) -> str:
    """A new key for ``endpoint``, of its signature scheme; the old one keeps signing too
    for ``grace`` (default ``OUTBOX["WEBHOOKS"]["ROTATION_GRACE_SECONDS"]``), so receivers
    can switch over. Returns what the receiver verifies with from now on: the new
    ``whsec_`` secret (v1; show it once), or the new ``whpk_`` public key (v1a)."""
    grace = _grace(grace)
    scheme = _scheme(endpoint.signature_scheme)
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_secret_expires_at = timezone.now() + grace
    endpoint.secret = signing.generate_key(scheme)
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
    return signing.verification_key(endpoint.secret)


def _grace(grace: timedelta | None) -> timedelta:
    if grace is None:
        grace = timedelta(seconds=conf.get().WEBHOOKS.ROTATION_GRACE_SECONDS)
    if not isinstance(grace, timedelta) or not timedelta(0) <= grace <= MAX_GRACE:
        raise ValidationError(
            f"grace must be a timedelta from 0 to {MAX_GRACE.days} days, not {grace!r}; "
            "timedelta(0) stops the old secret at once."
        )
    return grace


def signing_secrets(endpoint: Endpoint, now: datetime) -> list[str]:
    """The secrets that sign a request to ``endpoint`` now: the current one, and the
    previous one until its grace period ends."""
    live = [endpoint.secret]
    expires = endpoint.previous_secret_expires_at
    if endpoint.previous_secret and expires is not None and now < expires:
        live.append(endpoint.previous_secret)
    return live


def verify(
    headers: dict[str, str],
    body: bytes | str,
    secret: str | Iterable[str],
    tolerance: float = 300,
) -> Any:
    """For receivers: check a webhook's signature and timestamp; return its JSON payload.

    ``secret`` is what the receiver holds: the ``whsec_`` secret of a v1 endpoint or the
    ``whpk_`` public key of a v1a one (or a list of them, during a rotation). Raises
    ``signing.VerificationError`` when it does not check out.
    """
    return signing.verify(headers, body, secret, tolerance)
