"""What an attempt's result means: success, a retry (and when), or the end. Pure functions.

The schedule (``OUTBOX["WEBHOOKS"]["RETRY_SCHEDULE"]``) lists, for each attempt, the most
it waits before being sent; the first entry is the first attempt. Each retry's delay is a
uniform draw below its entry, never zero, so a burst of failures does not come back as a
burst. A ``Retry-After`` header is honoured within the schedule's bounds: never sooner than
the draw, never later than the schedule's longest delay.
"""

from __future__ import annotations

import email.utils
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

#: The smallest delay a retry gets, whatever the schedule says.
MIN_DELAY = 0.001


class Verdict(StrEnum):
    SUCCEEDED = "succeeded"
    RETRY = "retry"
    FAILED = "failed"  # the schedule is used up, or the failure is final
    GONE = "gone"  # 410 Gone: the receiver asks to stop; the endpoint is disabled


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    #: Seconds until the next attempt, for RETRY.
    delay: float | None = None


def retry_delay(
    number: int,
    schedule: tuple[float, ...],
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds before attempt ``number + 1`` (``number`` attempts made so far)."""
    ceiling = schedule[number]
    delay = max(MIN_DELAY, ceiling * (1.0 - (rng or random).random()))
    if retry_after is not None:
        delay = min(max(delay, retry_after), max(schedule))
    return delay


def decide(
    number: int,
    schedule: tuple[float, ...],
    status_code: int | None,
    final: bool = False,
    retry_after: float | None = None,
) -> Decision:
    """The verdict on attempt ``number`` (1 is the first)."""
    if status_code is not None and 200 <= status_code < 300:
        return Decision(Verdict.SUCCEEDED)
    if status_code == 410:
        return Decision(Verdict.GONE)
    if final or number >= len(schedule):
        return Decision(Verdict.FAILED)
    return Decision(Verdict.RETRY, retry_delay(number, schedule, retry_after))


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date); None when
    absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²".isdigit() is True too
        return min(float(value), 366 * 24 * 3600.0)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())
