"""Parsers for the comma-separated options of ``outbox_bench``, with the error each gives."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def whole_numbers(text: str, what: str, rule: str) -> list[int]:
    """``1,10,100`` as whole numbers of at least 1. ``what`` names them in "a
    comma-separated list of …"; ``rule`` says what they must be."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of {what}, not {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{rule}: {text!r}")
    return values


def names(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """``a,b`` as names, each one of ``allowed`` ("<what> are …; not …" otherwise)."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in chosen if name not in allowed]
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(
            f"{what} are {', '.join(allowed)}; not {', '.join(unknown) or repr(text)}"
        )
    return chosen


def history_days(text: str) -> int:
    """The days a history spans: at least 2, since its oldest day is pruned and the rest
    kept."""
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of days, not {text!r}") from None
    if days < 2:
        raise argparse.ArgumentTypeError(
            f"at least 2 days (the oldest one is pruned, the rest kept): {text!r}"
        )
    return days
