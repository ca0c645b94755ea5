"""What a JSON column can hold on every supported database."""

from __future__ import annotations

import json
from typing import Any

#: json.dumps with options of its own builds an encoder for each call.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
#: What Django's JSONField writes (``json.dumps``'s defaults): the text SQLite and MariaDB
#: keep as it is, so that lookups on it match rows however they were written.
_AS_DJANGO_WRITES = json.JSONEncoder()


def storable_problem(value: Any) -> str | None:
    """Why ``value`` (already JSON-shaped) cannot be stored, or None when it can.

    Beyond what JSON refuses (NaN, infinities), PostgreSQL's jsonb holds no NUL character
    and no lone surrogate; refusing them everywhere keeps SQLite and PostgreSQL alike.
    """
    return stored_size(value)[0]


def stored_size(value: Any) -> tuple[str | None, int]:
    """Why ``value`` cannot be stored (see storable_problem), or None and the size of its
    JSON in UTF-8 bytes."""
    problem, _text, size = json_text(value)
    return problem, size


_EMPTY: dict[type, str] = {list: "[]", dict: "{}"}


def json_text(value: Any) -> tuple[str | None, str, int]:
    """Why ``value`` cannot be stored (see storable_problem), or None, its JSON text as
    Django's JSONField stores it, and the size of its JSON in UTF-8 bytes (written out,
    not as ``\\u`` escapes)."""
    if type(value) in _EMPTY and not value:  # no arguments, or no keyword arguments
        return None, _EMPTY[type(value)], 2
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        return str(exc), "", 0
    except RecursionError:
        return "it is nested too deeply, or contains itself", "", 0
    if "\x00" in text or "\\u0000" in text:
        return "strings must not contain the NUL character (\\x00)", "", 0
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "strings must be valid Unicode (no lone surrogates)", "", 0
    return None, text if text.isascii() else _AS_DJANGO_WRITES.encode(value), size
