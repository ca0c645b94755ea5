"""The API's rate limit, per tenant, on the token buckets workers share
(``ratelimits``: Redis or the database): ``OUTBOX["WEBHOOKS"]["PORTAL_RATE"]`` and
``["PORTAL_BURST"]``."""

from __future__ import annotations

import hashlib
import math

from django_outbox import conf, ratelimits
from django_outbox.lib import text
from django_outbox.portal.problems import Problem


def bucket(tenant: str) -> str:
    """The bucket's key: the tenant, or its digest when it is long (keys are at most 255)."""
    if len(tenant) <= 200:
        return f"portal:{tenant}"
    return "portal:sha256:" + hashlib.sha256(tenant.encode()).hexdigest()


def throttle(tenant: str) -> None:
    """Take one request's token for ``tenant``; a 429 problem with Retry-After if none."""
    options = conf.get().WEBHOOKS
    rate = ratelimits.Rate.of(options.PORTAL_RATE, options.PORTAL_BURST)
    grant = ratelimits.take(bucket(tenant), rate, 1)
    if grant.granted:
        return
    wait = max(1, math.ceil(grant.retry_in))
    raise Problem(
        "rate-limited",
        f"Too many requests: at most {text.number(options.PORTAL_RATE)} per second on average "
        f"(bursts of {options.PORTAL_BURST}). Try again in {wait} s.",
        headers={"Retry-After": str(wait)},
    )
