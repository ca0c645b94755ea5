"""Standard Webhooks signatures: a pure module, no Django.

    webhook-id: msg_…            (the same on every attempt of a message)
    webhook-timestamp: 1733212345 (seconds since the epoch, when this attempt was signed)
    webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">
                       v1a,<base64 ed25519 signature of the same "{id}.{timestamp}.{body}">

Two schemes, told apart by the key's prefix:

- ``v1`` (symmetric): the secret ``whsec_`` + base64 of 24 to 64 random bytes, shared by
  sender and receiver.
- ``v1a`` (asymmetric): the sender signs with ``whsk_`` + base64 of a 32-byte ed25519 seed,
  which never leaves it; the receiver verifies with ``whpk_`` + base64 of the 32-byte public
  key, which is no secret. It needs the ``cryptography`` package (the ``ed25519`` extra),
  imported only when a v1a key is used.

During a rotation the message is signed with each live key, space-separated, whatever
their schemes, and a receiver accepts any signature that matches a key it holds.
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
#: A v1a endpoint's private signing key, and the public key its receiver verifies with.
PRIVATE_PREFIX = "whsk_"
PUBLIC_PREFIX = "whpk_"
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
ED25519_KEY_BYTES = 32
DEFAULT_TOLERANCE = 300
SCHEMES = ("v1", "v1a")
#: How to install what v1a needs.
ED25519_INSTALL = "pip install 'django-outbox-tasks[ed25519]'"


class VerificationError(Exception):
    """The webhook's signature, headers or timestamp do not check out."""


class InvalidSecret(ValueError):
    """A webhook secret must be "whsec_" followed by base64 of 24 to 64 bytes."""

    @classmethod
    def because(cls, detail: str) -> InvalidSecret:
        """The docstring's sentence with ``detail`` inside it: "… bytes (it holds 16 bytes)."."""
        return cls(f"{_sentence(cls.__doc__).removesuffix('.')} ({detail}).")


class InvalidKey(InvalidSecret):
    """A v1a key must be "whsk_" (the private key) or "whpk_" (the public key) followed by
    base64 of 32 bytes."""


class SchemeUnavailable(RuntimeError):
    """v1a signatures (ed25519) need the cryptography package:
    pip install 'django-outbox-tasks[ed25519]'."""


def generate_secret(size: int = 32) -> str:
    if not MIN_SECRET_BYTES <= size <= MAX_SECRET_BYTES:
        raise InvalidSecret(
            f"a secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {size}"
        )
    return PREFIX + base64.b64encode(secrets.token_bytes(size)).decode()


def generate_signing_key() -> str:
    """A new v1a private key, ``whsk_…``: a random ed25519 seed."""
    ed25519_available(raising=True)  # a key nothing here could sign with is no use
    return PRIVATE_PREFIX + base64.b64encode(secrets.token_bytes(ED25519_KEY_BYTES)).decode()


def generate_key(scheme: str) -> str:
    """A new key that signs with ``scheme``: a ``whsec_`` secret or a ``whsk_`` key."""
    if scheme == "v1a":
        return generate_signing_key()
    if scheme == "v1":
        return generate_secret()
    raise ValueError(f"the signature scheme must be one of {', '.join(SCHEMES)}, not {scheme!r}")


def scheme_of(key: str) -> str:
    """The scheme a sender's key signs with: "v1" for whsec_, "v1a" for whsk_."""
    return "v1a" if isinstance(key, str) and key.startswith(PRIVATE_PREFIX) else "v1"


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


def ed25519_key(key: str, prefix: str) -> bytes:
    """The 32 bytes of a ``whsk_`` or ``whpk_`` key (``prefix`` says which is wanted)."""
    if not isinstance(key, str) or not key.startswith(prefix):
        raise InvalidKey.because(f"expected {prefix!r}, got {_describe(key, prefix)}")
    try:
        raw = base64.b64decode(key[len(prefix) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidKey.because("its base64 does not decode") from None
    if len(raw) != ED25519_KEY_BYTES:
        raise InvalidKey.because(f"it holds {len(raw)} bytes")
    return raw


def check_key(key: str, scheme: str) -> None:
    """InvalidSecret unless ``key`` is a sender's key of ``scheme``; SchemeUnavailable for
    a v1a key where cryptography is not installed."""
    if scheme == "v1a":
        if isinstance(key, str) and key.startswith(PREFIX):
            raise InvalidKey.because("a whsec_ secret signs v1, not v1a")
        ed25519_key(key, PRIVATE_PREFIX)
        ed25519_available(raising=True)
    else:
        if isinstance(key, str) and key.startswith(PRIVATE_PREFIX):
            raise InvalidSecret.because("a whsk_ key signs v1a: choose that signature scheme")
        secret_key(key)


def public_key(private_key: str) -> str:
    """The ``whpk_`` public key of a ``whsk_`` private key: what its receiver verifies with."""
    seed = ed25519_key(private_key, PRIVATE_PREFIX)
    raw = _ed25519().Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return PUBLIC_PREFIX + base64.b64encode(raw.public_bytes_raw()).decode()


def verification_key(key: str) -> str:
    """What a receiver verifies a sender's ``key`` with: the secret itself for v1 (a shared
    secret), the public key for v1a."""
    return public_key(key) if scheme_of(key) == "v1a" else key


def ed25519_available(raising: bool = False) -> bool:
    """Whether v1a keys can be used here (the cryptography package imports)."""
    try:
        _ed25519()
    except SchemeUnavailable:
        if raising:
            raise
        return False
    return True


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SchemeUnavailable(_sentence(SchemeUnavailable.__doc__)) from None
    return ed25519


def _signed(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp}.".encode() + body


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One signature: ``v1,<base64>`` with a whsec_ secret, ``v1a,<base64>`` with a whsk_
    key."""
    signed = _signed(msg_id, timestamp, body)
    if scheme_of(secret) == "v1a":
        seed = ed25519_key(secret, PRIVATE_PREFIX)
        signature = _ed25519().Ed25519PrivateKey.from_private_bytes(seed).sign(signed)
        return "v1a," + base64.b64encode(signature).decode()
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secrets_: Iterable[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with every key given."""
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

    ``secret`` is what the receiver holds: a ``whsec_`` secret (v1 signatures) or a
    ``whpk_`` public key (v1a), or several of either (a rotation). The timestamp must be
    within ``tolerance`` seconds of ``now``, which stops replays of old requests.
    """
    candidates = [secret] if isinstance(secret, str) else list(secret)
    checks = [_checker(key) for key in candidates]  # a bad key fails before the request does
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
    signed = _signed(msg_id, timestamp, raw)
    for given in signature_header.split():
        version, _, value = given.partition(",")
        if any(check(version, value, signed) for check in checks):
            try:
                return json.loads(raw)
            except ValueError:
                raise VerificationError("the signature matches but the body is not JSON") from None
    raise VerificationError("no signature matches")


def _checker(key: str) -> Any:
    """A test of one ``(version, base64 signature, signed content)`` against ``key``."""
    if isinstance(key, str) and key.startswith(PRIVATE_PREFIX):
        raise InvalidKey(
            "verify() takes the whpk_ public key of a v1a endpoint, not its whsk_ private key "
            "(which stays with the sender)."
        )
    if isinstance(key, str) and key.startswith(PUBLIC_PREFIX):
        public = _ed25519().Ed25519PublicKey.from_public_bytes(ed25519_key(key, PUBLIC_PREFIX))

        def check_v1a(version: str, value: str, signed: bytes) -> bool:
            if version != "v1a":
                return False
            try:
                public.verify(base64.b64decode(value, validate=True), signed)
            except Exception:  # InvalidSignature, or base64 that does not decode
                return False
            return True

        return check_v1a
    shared = secret_key(key)

    def check_v1(version: str, value: str, signed: bytes) -> bool:
        if version != "v1":
            return False
        expected = base64.b64encode(hmac.new(shared, signed, hashlib.sha256).digest())
        return hmac.compare_digest(value.encode(), expected)

    return check_v1


def _sentence(doc: str | None) -> str:
    """A docstring as one line."""
    return " ".join((doc or "").split())


def _describe(value: object, prefix: str = PREFIX) -> str:
    """What was given, without repeating any of a secret's characters."""
    if isinstance(value, str):
        return f"a string of {len(value)} characters without the {prefix!r} prefix"
    return f"a {type(value).__name__}"
