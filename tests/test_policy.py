"""Retry decisions: properties, not values."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_outbox.webhooks import policy
from django_outbox.webhooks.policy import Verdict

SCHEDULE = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)


@given(number=st.integers(1, len(SCHEDULE) - 1), seed=st.integers(0, 2**32))
def test_a_retry_waits_more_than_zero_and_at_most_its_ceiling(number, seed):
    delay = policy.retry_delay(number, SCHEDULE, rng=random.Random(seed))
    assert 0 < delay <= SCHEDULE[number]


def test_delays_are_spread_below_the_ceiling():
    rng = random.Random(1)
    delays = [policy.retry_delay(2, SCHEDULE, rng=rng) for _ in range(2000)]
    assert min(delays) < 30 and max(delays) > 270


@given(retry_after=st.floats(0, 10**6), seed=st.integers(0, 2**32))
def test_retry_after_is_honoured_within_the_schedules_bounds(retry_after, seed):
    delay = policy.retry_delay(1, SCHEDULE, retry_after=retry_after, rng=random.Random(seed))
    assert delay <= max(SCHEDULE)
    assert delay >= min(retry_after, max(SCHEDULE))


@pytest.mark.parametrize(
    ("number", "status", "final", "verdict"),
    [
        (1, 200, False, Verdict.SUCCEEDED),
        (1, 204, False, Verdict.SUCCEEDED),
        (1, 410, False, Verdict.GONE),
        (1, 500, False, Verdict.RETRY),
        (1, 301, False, Verdict.RETRY),
        (1, None, False, Verdict.RETRY),
        (1, None, True, Verdict.FAILED),
        (8, 500, False, Verdict.FAILED),
        (8, 200, False, Verdict.SUCCEEDED),
    ],
)
def test_decide(number, status, final, verdict):
    decision = policy.decide(number, SCHEDULE, status, final=final)
    assert decision.verdict == verdict
    assert (decision.delay is not None) == (verdict == Verdict.RETRY)


def test_retry_after_as_seconds_or_a_date():
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert policy.parse_retry_after("120", now) == 120
    later = (now + timedelta(seconds=90)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert policy.parse_retry_after(later, now) == 90
    for junk in (None, "", "soon", "-5", "1e9"):
        assert policy.parse_retry_after(junk, now) is None
