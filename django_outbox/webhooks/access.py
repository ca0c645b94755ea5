"""Access to the portal for one tenant: bearer tokens for its API, and signed, expiring
links that open a portal session (docs/portal.md).

Both are Django signatures (``SECRET_KEY``), each under a salt of its own, so a link is not
a token, and no other value the site signs is either. They carry the tenant and when they
expire; nothing is stored, so one is good until it expires (or ``SECRET_KEY`` changes).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from django.core import signing
from django.urls import reverse

TOKEN_SALT = "django_outbox.portal.token"
LINK_SALT = "django_outbox.portal.link"
#: The longest a token or a link may be good for.
MAX_EXPIRES_IN = timedelta(days=366)
#: The URL namespace of django_outbox.portal.urls.
NAMESPACE = "django_outbox_portal"


class InvalidAccess(Exception):
    """A portal token or link that is not good: tampered with, expired, or not one.

    Its message is for whoever holds the token (the tenant's people or scripts) and names
    nothing of the application's; ``detail`` adds what the application's developers need
    (for the log). ``expired``: it was good once."""

    def __init__(self, message: str, detail: str = "", *, expired: bool = False) -> None:
        super().__init__(message)
        self.detail = detail or message
        self.expired = expired


def portal_token(tenant: str, *, expires_in: timedelta | float = timedelta(hours=1)) -> str:
    """A bearer token for ``tenant``'s portal API (``Authorization: Bearer <token>``),
    good for ``expires_in`` (a timedelta, or seconds)."""
    return _sign(tenant, expires_in, TOKEN_SALT)


def portal_url(
    tenant: str, *, expires_in: timedelta | float = timedelta(minutes=15), base: str = ""
) -> str:
    """A link that opens a portal session for ``tenant``, good for ``expires_in``.

    A path (``/webhooks/open/…/``) where the portal is mounted, after ``base``
    (``"https://app.example.com"``) when given."""
    token = _sign(tenant, expires_in, LINK_SALT)
    return base.rstrip("/") + reverse(f"{NAMESPACE}:open", args=[token])


def tenant_of(token: str, salt: str) -> str:
    """The tenant a token or link (by its ``salt``) was made for; InvalidAccess if it is
    not good, saying why."""
    try:
        claims = signing.loads(token, salt=salt)
    except signing.BadSignature:
        raise InvalidAccess(
            "The token is not valid: it was changed or cut short. Ask the application for a "
            "new one.",
            "the signature does not match: the token was changed, cut short, or signed with "
            "another SECRET_KEY (or for the other salt: a link is not a token)",
        ) from None
    if not isinstance(claims, dict) or not isinstance(claims.get("t"), str):
        raise InvalidAccess("The token is not a portal token. Ask the application for one.")
    expires = claims.get("x")
    if not isinstance(expires, int | float) or expires <= time.time():
        when = datetime.fromtimestamp(float(expires or 0), UTC).isoformat(timespec="seconds")
        raise InvalidAccess(
            f"The token expired at {when}. Ask the application for a new one.", expired=True
        )
    return claims["t"]


def _sign(tenant: str, expires_in: timedelta | float, salt: str) -> str:
    if not isinstance(tenant, str) or not 0 < len(tenant) <= 255:
        raise ValueError(
            f"tenant must be a string of 1 to 255 characters (an endpoint's tenant), "
            f"not {tenant!r}."
        )
    seconds = (
        expires_in.total_seconds()
        if isinstance(expires_in, timedelta)
        else expires_in
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool)
        else None
    )
    if seconds is None or not 0 < seconds <= MAX_EXPIRES_IN.total_seconds():
        raise ValueError(
            f"expires_in must be a timedelta (or seconds) above 0 and at most "
            f"{MAX_EXPIRES_IN.days} days, not {expires_in!r}."
        )
    return signing.dumps({"t": tenant, "x": round(time.time() + seconds)}, salt=salt)
