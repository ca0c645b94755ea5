"""Endpoints: create, change, enable, disable, and what is wrong with a field's value
(``endpoint_problems()``, which the portal shows field by field)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from django_outbox.models import Endpoint, SignatureScheme
from django_outbox.webhooks import guard, signing, values
from django_outbox.webhooks import headers as endpoint_headers
from django_outbox.webhooks.scope import in_webhooks_database


@in_webhooks_database
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
    scheme = values.scheme(signature_scheme)
    key = values.key(secret, scheme)
    return Endpoint.objects.create(
        url=url,
        event_types=values.filters(event_types),
        tenant=values.short_text("tenant", tenant),
        description=values.description(description),
        timeout=values.timeout(timeout),
        secret=key,
        signature_scheme=scheme,
        rate_limit=values.rate_limit(rate_limit),
        headers=endpoint_headers.clean(headers),
    )


class _Keep:
    """An ``update_endpoint()`` argument not given: the value stays as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


@in_webhooks_database
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
        changes["event_types"] = values.filters(event_types)
    if description is not KEEP:
        changes["description"] = values.description(description)
    if timeout is not KEEP:
        changes["timeout"] = values.timeout(timeout)
    if rate_limit is not KEEP:
        changes["rate_limit"] = values.rate_limit(rate_limit)
    if headers is not KEEP:
        changes["headers"] = endpoint_headers.clean(headers)
    if signature_scheme is not KEEP and signature_scheme != endpoint.signature_scheme:
        changes["signature_scheme"] = values.scheme(signature_scheme)
        grace = values.grace(grace)
        changes["previous_secret"] = endpoint.secret
        changes["previous_secret_expires_at"] = timezone.now() + grace
        changes["secret"] = signing.generate_key(changes["signature_scheme"])
    for name, value in changes.items():
        setattr(endpoint, name, value)
    if changes:
        endpoint.save(update_fields=list(changes))
    return endpoint


@in_webhooks_database
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


@in_webhooks_database
def disable(endpoint: Endpoint, reason: str = "by hand") -> None:
    """Send nothing more to ``endpoint`` until it is enabled. ``reason`` reads after
    "disabled: " ("by hand", "in the admin by alice")."""
    endpoint.active, endpoint.disabled_reason = False, reason[:255]
    endpoint.disabled_at = timezone.now()
    endpoint.save(update_fields=["active", "disabled_reason", "disabled_at"])


@in_webhooks_database
def set_rate_limit(endpoint: Endpoint, rate_limit: float | None) -> None:
    """At most ``rate_limit`` requests per second to ``endpoint`` from now on (None: no
    limit). Deliveries over it wait for their turn: they are not failed."""
    endpoint.rate_limit = values.rate_limit(rate_limit)
    endpoint.save(update_fields=["rate_limit"])


def endpoint_problems(*, for_customers: bool = False, **fields: Any) -> dict[str, str]:
    """What is wrong with each of these endpoint fields, by name (empty: nothing is).

    The one place an endpoint's fields are checked, field by field, so that the portal
    can say which field was wrong; ``create_endpoint()`` and ``update_endpoint()`` refuse
    the same values. ``for_customers``: the portal's messages, which name no setting of
    the application's (its log has the full ones)."""
    checks: dict[str, Callable[[Any], object]] = {
        "url": functools.partial(guard.check_url, for_customers=for_customers),
        "description": values.description,
        "event_types": values.filters,
        "timeout": values.timeout,
        "rate_limit": values.rate_limit,
        "headers": endpoint_headers.clean,
        "signature_scheme": values.scheme,
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
