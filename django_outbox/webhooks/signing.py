"""Standard Webhooks signatures: a pure module, no Django.

    webhook-id: msg_…            (the same on every attempt of a message)
    webhook-timestamp: 1733212345 (seconds since the epoch, when this attempt was signed)
    webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">

Secrets are ``whsec_`` + base64 of 24 to 64 random bytes. During a rotation the message is
signed with each live secret, space-separated, and a receiver accepts any that matches.
See https://www.standardwebhooks.com/.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

from django_outbox.lib import text

PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
DEFAULT_TOLERANCE = 300


class VerificationError(Exception):
    """The webhook's signature, headers or timestamp do not check out."""


class InvalidSecret(ValueError):
    """A webhook secret must be "whsec_" followed by base64 of 24 to 64 bytes."""

    @classmethod
    def because(cls, detail: str) -> InvalidSecret:
        """The docstring's sentence with ``detail`` inside it: "… bytes (it holds 16 bytes)."."""
        return cls(f"{(cls.__doc__ or '').removesuffix('.')} ({detail}).")


def generate_secret(size: int = 32) -> str:
    if not MIN_SECRET_BYTES <= size <= MAX_SECRET_BYTES:
        raise InvalidSecret(
            f"a secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {size}"
        )
    return PREFIX + base64.b64encode(secrets.token_bytes(size)).decode()


def secret_key(secret: str) -> bytes:
    """The key bytes of a ``whsec_`` secret; InvalidSecret for anything else."""
    if not isinstance(secret, str) or not secret.startswith(PREFIX):
        raise InvalidSecret.because(f"got {_describe(secret)}")
    try:
        key = base64.b64decode(secret[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret.because("its base64 does not decode") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidSecret.because(f"it holds {len(key)} bytes")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secrets_: Iterable[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with every secret given."""
    signatures = [sign(secret, msg_id, timestamp, body) for secret in secrets_]
    if not signatures:
        raise InvalidSecret("at least one secret is needed to sign")
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signatures),
    }


def verify(
    received: Mapping[str, str],
    body: bytes | str,
    secret: str | Iterable[str],
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> Any:
    """Check a received webhook and return its JSON payload; VerificationError if it fails.

    ``secret`` may be several (a receiver's own rotation). The timestamp must be within
    ``tolerance`` seconds of ``now``, which stops replays of old requests.
    """
    lowered = {str(k).lower(): str(v) for k, v in received.items()}
    names = ("webhook-id", "webhook-timestamp", "webhook-signature")
    missing = [name for name in names if not lowered.get(name)]
    if missing:
        raise VerificationError(f"missing header{'s' * (len(missing) > 1)}: {', '.join(missing)}")
    msg_id, stamp, signature_header = (lowered[name] for name in names)
    try:
        timestamp = int(stamp)
    except ValueError:
        raise VerificationError(f"webhook-timestamp is not a whole number: {stamp!r}") from None
    now = time.time() if now is None else now
    age = now - timestamp
    if abs(age) > tolerance:
        raise VerificationError(
            f"webhook-timestamp is {text.duration(abs(age))} "
            f"{'old' if age > 0 else 'in the future'}, more than the "
            f"{text.duration(tolerance)} allowed (a replayed request, or a clock that is off)"
        )
    raw = body.encode() if isinstance(body, str) else body
    candidates = [secret] if isinstance(secret, str) else list(secret)
    expected = [sign(s, msg_id, timestamp, raw).encode() for s in candidates]
    for given in signature_header.split():
        if not given.startswith("v1,"):
            continue
        if any(hmac.compare_digest(given.encode(), e) for e in expected):
            try:
                return json.loads(raw)
            except ValueError:
                raise VerificationError("the signature matches but the body is not JSON") from None
    raise VerificationError("no signature matches")


def _describe(value: object) -> str:
    """What was given, without repeating any of a secret's characters."""
    if isinstance(value, str):
        return f"a string of {len(value)} characters without the {PREFIX!r} prefix"
    return f"a {type(value).__name__}"
