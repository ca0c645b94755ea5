"""An endpoint's own HTTP headers: what may be set, and what is refused.

A receiver often wants a header of its own on every request (an API key for its gateway,
a routing hint). They are checked when they are set, so a delivery never finds a header it
cannot send. Refused: names that are not HTTP tokens (RFC 9110, section 5.6.2), values with
a line break or any other control character (they would split the request), and the
headers django_outbox or the HTTP client owns: the Standard Webhooks ones (``webhook-*``,
the signature among them) and those that describe the request itself (``host``,
``content-length`` …), which a receiver could be fooled by or a request broken with.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError

MAX_HEADERS = 20
MAX_NAME = 100
MAX_VALUE = 1024
#: All names and values together, in characters: well under the 8 KiB of request headers
#: that common servers accept, with room for ours.
MAX_TOTAL = 4096

#: An HTTP token: the characters a header name may hold.
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Visible ASCII, spaces and tabs inside; no control character, no line break.
VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?|")

#: The Standard Webhooks headers: every name that starts with this is ours.
STANDARD_PREFIX = "webhook-"
#: What the HTTP client or django_outbox sets on every request.
RESERVED = frozenset(
    {
        "accept-encoding",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "expect",
        "host",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
    }
)


def clean(headers: Any) -> dict[str, str]:
    """``headers`` checked, as a new dict; ValidationError saying what is wrong with the
    first bad one. A value is never repeated in a message: it may be a credential."""
    if headers is None:
        return {}
    if not isinstance(headers, dict):
        raise ValidationError(
            f"headers must be a dict of header names to values, not {type(headers).__name__}."
        )
    if len(headers) > MAX_HEADERS:
        raise ValidationError(
            f"An endpoint may set at most {MAX_HEADERS} headers of its own, not {len(headers)}."
        )
    seen: dict[str, str] = {}
    total = 0
    for name, value in headers.items():
        _check_name(name)
        lowered = name.lower()
        if lowered in seen:
            raise ValidationError(
                f"The headers {seen[lowered]!r} and {name!r} are the same header: header names "
                "are case-insensitive. Set it once."
            )
        seen[lowered] = name
        _check_value(name, value)
        total += len(name) + len(value)
    if total > MAX_TOTAL:
        raise ValidationError(
            f"An endpoint's headers may hold at most {MAX_TOTAL:,} characters in all (names and "
            f"values), not {total:,}."
        )
    return dict(headers)


def reserved(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith(STANDARD_PREFIX) or lowered in RESERVED


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ValidationError(f"A header name must be a non-empty string, not {name!r}.")
    if len(name) > MAX_NAME:
        raise ValidationError(
            f"The header name {name[:20]!r}… has {len(name)} characters; at most {MAX_NAME}."
        )
    if not TOKEN.fullmatch(name):
        raise ValidationError(
            f"{name!r} is not a valid header name: use letters, digits and "
            "!#$%&'*+-.^_`|~ only (no spaces, colons or other characters), e.g. 'X-Api-Key'."
        )
    if name.lower().startswith(STANDARD_PREFIX):
        raise ValidationError(
            f"The header {name!r} is reserved: webhook-id, webhook-timestamp, webhook-signature "
            "and every other webhook-* header are set by django_outbox (Standard Webhooks)."
        )
    if name.lower() in RESERVED:
        raise ValidationError(
            f"The header {name!r} is reserved: it is set by django_outbox or its HTTP client "
            f"for every request ({', '.join(sorted(RESERVED))})."
        )


def _check_value(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise ValidationError(
            f"The value of the header {name!r} must be a string, not {type(value).__name__}."
        )
    if len(value) > MAX_VALUE:
        raise ValidationError(
            f"The value of the header {name!r} has {len(value):,} characters; at most "
            f"{MAX_VALUE:,}."
        )
    if VALUE.fullmatch(value):
        return
    if "\r" in value or "\n" in value:
        why = "holds a line break (CR or LF), which would end the header"
    elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in value if c != "\t"):
        why = "holds a control character"
    elif any(ord(c) > 0x7E for c in value):
        why = "holds a character outside ASCII (encode it first, e.g. percent-encoding)"
    else:
        why = "starts or ends with a space or tab"
    raise ValidationError(f"The value of the header {name!r} {why}.")
