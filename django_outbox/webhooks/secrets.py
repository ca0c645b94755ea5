"""An endpoint's keys: which schemes sign here, what its receiver verifies with, the
rotation to a new key (the old one signing too for a grace period), and ``verify()`` for
receivers."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_outbox.models import Endpoint
from django_outbox.webhooks import signing, values
from django_outbox.webhooks.scope import in_webhooks_database


def signature_schemes() -> list[str]:
    """The signature schemes an endpoint may use here: "v1", and "v1a" where the
    cryptography package is installed."""
    return ["v1", "v1a"] if signing.ed25519_available() else ["v1"]


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


@in_webhooks_database
def rotate_secret(endpoint: Endpoint, grace: timedelta | None = None) -> str:
    """A new key for ``endpoint``, of its signature scheme; the old one keeps signing too
    for ``grace`` (default ``OUTBOX["WEBHOOKS"]["ROTATION_GRACE_SECONDS"]``), so receivers
    can switch over. Returns what the receiver verifies with from now on: the new
    ``whsec_`` secret (v1; show it once), or the new ``whpk_`` public key (v1a)."""
    grace = values.grace(grace)
    scheme = values.scheme(endpoint.signature_scheme)
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_secret_expires_at = timezone.now() + grace
    endpoint.secret = signing.generate_key(scheme)
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
    return signing.verification_key(endpoint.secret)


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
