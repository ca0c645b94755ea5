"""What a JSON column can hold on every supported database."""

from __future__ import annotations

import json
from typing import Any


def storable_problem(value: Any) -> str | None:
    """Why ``value`` (already JSON-shaped) cannot be stored, or None when it can.

    Beyond what JSON refuses (NaN, infinities), PostgreSQL's jsonb holds no NUL character
    and no lone surrogate; refusing them everywhere keeps SQLite and PostgreSQL alike.
    """
    return stored_size(value)[0]


def stored_size(value: Any) -> tuple[str | None, int]:
    """Why ``value`` cannot be stored (see storable_problem), or None and the size of its
    JSON in UTF-8 bytes."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        return str(exc), 0
    except RecursionError:
        return "it is nested too deeply, or contains itself", 0
    if "\x00" in text or "\\u0000" in text:
        return "strings must not contain the NUL character (\\x00)", 0
    try:
        return None, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "strings must be valid Unicode (no lone surrogates)", 0
