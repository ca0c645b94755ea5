import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_outbox.jobs import backoff

attempts = st.integers(min_value=1, max_value=10_000)
bases = st.floats(min_value=0.001, max_value=1000, allow_nan=False)
caps_over = st.floats(min_value=1, max_value=1e6, allow_nan=False)


@given(attempt=attempts, base=bases, factor=caps_over, seed=st.integers())
def test_delay_is_never_zero_and_never_above_the_ceiling_or_cap(attempt, base, factor, seed):
    cap = base * factor
    delay = backoff.delay(attempt, base, cap, random.Random(seed))
    assert 0 < delay <= backoff.ceiling(attempt, base, cap) <= cap


@given(attempt=st.integers(min_value=1, max_value=60), base=bases, factor=caps_over)
def test_ceiling_doubles_until_the_cap(attempt, base, factor):
    cap = base * factor
    assert backoff.ceiling(attempt + 1, base, cap) == min(
        cap, 2 * backoff.ceiling(attempt, base, cap)
    )
    assert backoff.ceiling(1, base, cap) == min(base, cap)


def test_delays_spread_over_the_whole_interval():
    rng = random.Random(7)
    delays = [backoff.delay(5, 1.0, 100.0, rng) for _ in range(2000)]
    # ceiling for attempt 5 is 16 s: full jitter uses all of (0, 16], not a band near the top.
    assert max(delays) <= 16
    assert min(delays) < 1.6 and max(delays) > 14.4
    assert 7 < sum(delays) / len(delays) < 9


def test_attempt_numbers_start_at_one():
    with pytest.raises(ValueError, match="starts at 1"):
        backoff.ceiling(0, 1.0, 10.0)
