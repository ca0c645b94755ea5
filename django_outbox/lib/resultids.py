"""Result ids: ``TaskResult.id`` is the job's primary key and its random token,
``"<pk>-<token in lowercase hex>"`` (``"42-5f3a9c1"``).

A primary key alone can name two jobs over time: SQLite hands the key of a rolled-back
insert to the next one (its sequence rolls back too), and a sequence can be reset on any
database. The token, drawn for each row when it is written, makes the id of a job that
never committed name nothing rather than the job that took its key. Rows stored before
tokens existed have token 0; their id is the bare primary key, as it was.

No Django import here: the model takes its default from this module.
"""

from __future__ import annotations

import re
import secrets
from typing import NamedTuple

#: Tokens are 1 … TOKEN_MAX (a signed 32-bit column on every database); 0 marks a row
#: stored before tokens existed.
TOKEN_MAX = 2**31 - 1
#: The largest primary key (a signed 64-bit column).
PK_MAX = 2**63 - 1

#: Canonical forms only (what result_id() writes): no sign, no leading zero, no spaces,
#: lowercase hex, ASCII digits.
_FORM = re.compile(r"([1-9][0-9]{0,18})(?:-([1-9a-f][0-9a-f]{0,7}))?")


class ResultId(NamedTuple):
    pk: int
    token: int


def new_token() -> int:
    """A random token for a new job row, never 0."""
    return secrets.randbelow(TOKEN_MAX) + 1


def new_tokens(count: int) -> list[int]:
    """``count`` tokens as ``new_token`` draws them, from one read of the system's random
    source: a bulk enqueue would otherwise ask the kernel once per job."""
    drawn = memoryview(secrets.token_bytes(4 * count)).cast("I").tolist()
    # 31 bits each, 0 … 2**31 - 1; the one value past TOKEN_MAX goes to 0, and all then to
    # 1 … TOKEN_MAX (1 twice as likely as any other: one chance in a billion).
    return [(value & TOKEN_MAX) % TOKEN_MAX + 1 for value in drawn]


def result_id(pk: int, token: int) -> str:
    """The id of the job with primary key ``pk`` and ``token``."""
    return f"{pk}-{token:x}" if token else str(pk)


def parse_result_id(text: object) -> ResultId:
    """The primary key and token a result id names; ValueError for anything result_id()
    would not have written."""
    match = _FORM.fullmatch(text) if isinstance(text, str) else None
    if match is not None:
        pk, token = int(match[1]), int(match[2] or "0", 16)
        if pk <= PK_MAX and token <= TOKEN_MAX:
            return ResultId(pk, token)
    shown = repr(text)
    if len(shown) > 40:
        shown = shown[:40] + "…"
    raise ValueError(
        f"{shown} is not a job's result id: they look like '42-5f3a9c1' (the job's number, "
        "a hyphen and a hexadecimal token), as TaskResult.id gives them."
    )
