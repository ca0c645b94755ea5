"""Numbers as people read them, for messages: ``31,622,400``, not ``3.16224e+07``;
``70 ms``, not ``0.07032319600001176``."""

from __future__ import annotations


def number(value: float) -> str:
    """Whole numbers with thousands separators; others with up to three decimals (six
    below 1), trailing zeros dropped; never in e-notation."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == int(value):
        return f"{int(value):,}"
    places = 3 if abs(value) >= 1 else 6
    text = f"{value:,.{places}f}".rstrip("0").rstrip(".")
    return text if text not in ("0", "-0") else f"{value:.1e}"


def duration(seconds: float) -> str:
    """A measured time: ``70 ms``, ``1.5 s``, ``2 min 5 s``, ``3 h 20 min``, ``2 days 4 h``."""
    if seconds < 0:
        return "-" + duration(-seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.0005 else f"{seconds * 1e6:.0f} µs"
    if seconds < 60:
        return f"{number(round(seconds, 1))} s"
    whole = round(seconds)
    for unit, size, smaller, smaller_size in (
        ("days", 86400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if whole >= size:
            big, rest = divmod(whole, size)
            label = "day" if unit == "days" and big == 1 else unit
            extra = rest // smaller_size
            return f"{big:,} {label}" + (f" {extra} {smaller}" if extra else "")
    return f"{whole} s"  # pragma: no cover (whole >= 60 here)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 job``, ``2 jobs``, ``12,345 jobs``; ``plural`` for nouns that take more than an
    "s" (``count(2, "delivery", "deliveries")``)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
