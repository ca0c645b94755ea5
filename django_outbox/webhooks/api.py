"""What an application calls: endpoints, ``send()``, and the operations on deliveries.

Everything here runs in the caller's transaction: a rollback sends nothing.
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
from django_outbox.jobs.jsonvalues import storable_problem
from django_outbox.jobs.results import resolve_task
from django_outbox.lib import text
from django_outbox.models import Delivery, DeliveryStatus, Endpoint, Job, Message
from django_outbox.models.jobs import ACTIVE_STATUSES
from django_outbox.task import OutboxTask
from django_outbox.webhooks import fanout, guard, signing

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
) -> Endpoint:
    """A new active endpoint; ``endpoint.secret`` is what its owner verifies with.

    ``rate_limit``: requests per second at most, shared by every worker (None: no limit).
    ValidationError for a URL that is not http(s) or that names a non-public address.
    """
    guard.check_url(url)
    if secret is not None:
        try:
            signing.secret_key(secret)
        except signing.InvalidSecret as exc:
            raise ValidationError(str(exc)) from None
    if not isinstance(description, str):
        raise ValidationError(f"description must be a string, not {description!r}.")
    return Endpoint.objects.create(
        url=url,
        event_types=_patterns(event_types),
        tenant=_text("tenant", tenant),
        description=description,
        timeout=_timeout(timeout),
        secret=secret or signing.generate_secret(),
        rate_limit=_rate_limit(rate_limit),
    )


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

    In the caller's transaction: a rollback sends nothing. A repeated ``idempotency_key``
    (per tenant) returns the message it sent first and sends nothing new. The statements
    it runs do not grow with the number of endpoints.

    ``ordering_key``: messages with the same key reach each endpoint in the order they
    were sent; a delivery being retried holds back the later ones of its key to its
    endpoint, and nothing else.
    """
    if not isinstance(event_type, str) or not EVENT_TYPE.fullmatch(event_type):
        raise ValidationError(
            f"{event_type!r} is not an event type: use 1 to 255 letters, digits and "
            "'_ . : -', e.g. 'invoice.paid'."
        )
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
    using = _using()
    with transaction.atomic(using=using):
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
        fan_out(message, now)
    return message


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def fan_out(message: Message, now: datetime, endpoint_ids: list[int] | None = None) -> int:
    """Deliveries of ``message`` and their jobs, then a wake-up on commit."""
    using = _using()
    created = fanout.insert_deliveries(
        using, message.pk, message.event_type, message.tenant, now, endpoint_ids
    )
    if created:
        enqueue_delivery_jobs(message.pk, now, endpoint_ids, message.ordering_key)
    return created


def enqueue_delivery_jobs(
    message_id: int,
    now: datetime,
    endpoint_ids: list[int] | None = None,
    ordering_key: str | None = None,
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
    return fanout.insert_jobs(_using(), task, message_id, now, endpoint_ids, ordering_key)


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
    return Job.objects.filter(
        dedup_key=f"{fanout.DEDUP_PREFIX}{delivery_id}", status__in=ACTIVE_STATUSES
    ).exists()


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
        fan_out(message, now, [endpoint.pk])
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
ENDPOINT_FIELDS = ("url", "description", "event_types", "timeout", "rate_limit")


def endpoint_problems(**fields: Any) -> dict[str, str]:
    """What is wrong with each of these endpoint fields, by name (empty: nothing is).

    The one place an endpoint's fields are checked, field by field, so that the portal
    can say which field was wrong; ``create_endpoint()`` and ``update_endpoint()`` refuse
    the same values."""
    checks: dict[str, Callable[[Any], object]] = {
        "url": guard.check_url,
        "description": lambda value: _text_field("description", value),
        "event_types": _patterns,
        "timeout": _timeout,
        "rate_limit": _rate_limit,
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


def _text_field(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string, not {value!r}.")


@_in_webhooks_database
def update_endpoint(endpoint: Endpoint, **changes: Any) -> Endpoint:
    """Change some of ``endpoint``'s fields (``ENDPOINT_FIELDS``), checked as
    ``create_endpoint()`` checks them; ValidationError (a dict by field) changes nothing."""
    problems = endpoint_problems(**changes)
    if problems:
        raise ValidationError({name: [message] for name, message in problems.items()})
    cleaners: dict[str, Callable[[Any], Any]] = {
        "event_types": _patterns,
        "timeout": _timeout,
        "rate_limit": _rate_limit,
    }
    for name, value in changes.items():
        setattr(endpoint, name, cleaners.get(name, lambda same: same)(value))
    if changes:
        endpoint.save(update_fields=list(changes))
    return endpoint


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
    """A new secret for ``endpoint``; the old one keeps signing too for ``grace`` (default
    ``OUTBOX["WEBHOOKS"]["ROTATION_GRACE_SECONDS"]``), so receivers can switch over."""
    if grace is None:
        grace = timedelta(seconds=conf.get().WEBHOOKS.ROTATION_GRACE_SECONDS)
    if not isinstance(grace, timedelta) or not timedelta(0) <= grace <= MAX_GRACE:
        raise ValidationError(
            f"grace must be a timedelta from 0 to {MAX_GRACE.days} days, not {grace!r}; "
            "timedelta(0) stops the old secret at once."
        )
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_secret_expires_at = timezone.now() + grace
    endpoint.secret = signing.generate_secret()
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
    return endpoint.secret


def signing_secrets(endpoint: Endpoint, now: datetime) -> list[str]:
    """The secrets that sign a request to ``endpoint`` now: the current one, and the
    previous one until its grace period ends."""
    live = [endpoint.secret]
    expires = endpoint.previous_secret_expires_at
    if endpoint.previous_secret and expires is not None and now < expires:
        live.append(endpoint.previous_secret)
    return live


def verify(headers: dict[str, str], body: bytes | str, secret: str, tolerance: float = 300) -> Any:
    """For receivers: check a webhook's signature and timestamp; return its JSON payload.

    Raises ``signing.VerificationError`` when it does not check out.
    """
    return signing.verify(headers, body, secret, tolerance)
