"""Full-jitter backoff: a pure function.

The ceiling doubles from ``base`` per attempt up to ``cap``; the delay is a uniform draw
below the ceiling. Spreading retries over the whole interval, rather than retrying at
fixed steps, keeps a burst of failures from coming back as a burst.
"""

from __future__ import annotations

import random


def ceiling(attempt: int, base: float, cap: float) -> float:
    """The largest delay after the ``attempt``-th failed run (attempt 1 is the first)."""
    if attempt < 1:
        raise ValueError(f"attempt starts at 1, not {attempt}")
    # Cap the exponent before raising 2 to it, so attempt 10,000 does not overflow.
    exponent = min(attempt - 1, 1023)
    return min(cap, base * 2.0**exponent)


def delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before the next run: in (0, ceiling], never zero."""
    draw = (rng or random).random()  # in [0, 1)
    return ceiling(attempt, base, cap) * (1.0 - draw)
