"""Numbers in messages read as people write them."""

import pytest

from django_outbox.lib.text import count, duration, number


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (366 * 24 * 3600.0, "31,622,400"),
        (1e6, "1,000,000"),
        (0.5, "0.5"),
        (2.25, "2.25"),
        (1 / 3, "0.333333"),
        (1234.5678, "1,234.568"),
        (1e-6, "0.000001"),
        (1e-9, "1.0e-09"),
        (-3.0, "-3"),
        (0, "0"),
    ],
)
def test_number(value, shown):
    assert number(value) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.07032319600001176, "70 ms"),
        (0.0001, "100 µs"),
        (1.5, "1.5 s"),
        (59.96, "60 s"),
        (125, "2 min 5 s"),
        (3600 * 3 + 1200, "3 h 20 min"),
        (86400, "1 day"),
        (86400 * 2 + 3600 * 4, "2 days 4 h"),
        (-1.5, "-1.5 s"),
    ],
)
def test_duration(seconds, shown):
    assert duration(seconds) == shown


def test_no_message_of_the_settings_checks_uses_e_notation():
    from django_outbox import conf

    errors = conf.webhook_settings_errors({"DISABLE_AFTER_SECONDS": 10**12})
    assert errors and "31,622,400" in errors[0] and "e+" not in errors[0]


@pytest.mark.parametrize(
    ("n", "noun", "plural", "shown"),
    [
        (0, "job", None, "0 jobs"),
        (1, "job", None, "1 job"),
        (2, "job", None, "2 jobs"),
        (12345, "job", None, "12,345 jobs"),
        (1, "delivery", "deliveries", "1 delivery"),
        (3, "delivery", "deliveries", "3 deliveries"),
    ],
)
def test_count(n, noun, plural, shown):
    assert count(n, noun, plural) == shown
