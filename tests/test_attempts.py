"""The batched latest-attempt lookup: one query for a batch, each key's own bound."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.models import Attempt, Delivery, Endpoint
from django_outbox.webhooks import attempts
from django_outbox.webhooks.attempts import Key

pytestmark = pytest.mark.django_db


def deliveries(count: int) -> list[Delivery]:
    Endpoint.objects.bulk_create(
        Endpoint(url=f"https://hooks.example.com/{i}", secret="whsec_x") for i in range(count)
    )
    message = webhooks.send("invoice.paid", {"id": 1})
    return list(Delivery.objects.filter(message=message).order_by("pk"))


def log(delivery: Delivery, number: int, at, succeeded: bool = False) -> Attempt:
    return Attempt.objects.create(
        delivery=delivery, number=number, started_at=at, duration=0.1, succeeded=succeeded
    )


def test_one_query_returns_the_latest_attempt_of_each_delivery(django_assert_num_queries):
    batch = deliveries(50)
    now = timezone.now()
    expected = {}
    for position, delivery in enumerate(batch):
        if position % 5 == 0:
            continue  # never attempted
        for number in range(1, position % 4 + 2):
            expected[delivery.pk] = log(delivery, number, now + timedelta(seconds=number))
    keys = [Key(d.pk, now - timedelta(minutes=1)) for d in batch]
    with django_assert_num_queries(1):
        found = attempts.latest(keys)
    assert [a.pk if a else None for a in found] == [
        expected[d.pk].pk if d.pk in expected else None for d in batch
    ]


def test_each_key_keeps_its_own_bound():
    first, second = deliveries(2)
    now = timezone.now()
    log(first, 1, now - timedelta(minutes=10))
    log(second, 1, now - timedelta(minutes=10))
    found = attempts.latest([Key(first.pk, now - timedelta(minutes=11)), Key(second.pk, now)])
    assert found[0] is not None and found[1] is None  # older than the second key's bound


def test_bounds_wider_than_15_minutes_are_split_and_a_batch_of_one_uses_the_single_lookup():
    batch = deliveries(4)
    now = timezone.now()
    keys = [Key(d.pk, now - timedelta(hours=i)) for i, d in enumerate(batch)]
    assert [len(g) for g in attempts.split(keys)] == [1, 1, 1, 1]
    close = [Key(d.pk, now - timedelta(minutes=i)) for i, d in enumerate(batch)]
    assert [len(g) for g in attempts.split(close)] == [4]
    with CaptureQueriesContext(connection) as queries:
        attempts.latest(keys)
    assert len(queries) == 4
    assert all("ROW_NUMBER" not in q["sql"].upper() for q in queries)  # single lookups
    with CaptureQueriesContext(connection) as queries:
        attempts.latest(close)
    assert len(queries) == 1 and "ROW_NUMBER" in queries[0]["sql"].upper()


def test_the_lookup_uses_the_delivery_started_index_on_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("EXPLAIN output is PostgreSQL's")
    batch = deliveries(3)
    now = timezone.now()
    Attempt.objects.bulk_create(
        Attempt(delivery=d, number=n, started_at=now, duration=0.1)
        for d in batch
        for n in range(1, 200)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_attempt")
        cursor.execute("SET enable_seqscan = off")
    query = Attempt.objects.filter(delivery_id__in=[d.pk for d in batch], started_at__gte=now)
    assert "outbox_attempt_latest" in query.explain()


def test_a_batch_of_attempts_is_written_exactly_as_given():
    """The attempt log's batched INSERT (one array per column on PostgreSQL) keeps every
    value: quotes, backslashes, braces, commas, the word NULL, None, floats and booleans."""
    from django_outbox.db.inserts import insert_rows
    from django_outbox.webhooks.recording import _ATTEMPT_FIELDS

    delivery = deliveries(1)[0]
    now = timezone.now()
    rows = [
        (delivery.pk, 1, now, 0.25, True, 200, {"x-a": 'say "hi", {ok}'}, "ok\\done", "", ""),
        (delivery.pk, 2, now, 1e-06, False, None, {}, "", "ConnectError", "NULL"),
        (delivery.pk, 3, now, 12.5, False, 500, {"k": "NULL", "v": "\\"}, '{"a": [1]}', "", "é ✓"),
    ]
    ids = insert_rows("attempt-log", Attempt, _ATTEMPT_FIELDS, rows)
    stored = Attempt.objects.in_bulk(ids)
    for pk, row in zip(ids, rows, strict=True):
        attempt = stored[pk]
        got = tuple(
            attempt.delivery_id if name == "delivery" else getattr(attempt, name)
            for name in _ATTEMPT_FIELDS
        )
        assert got == row


def test_two_attempts_numbered_1_of_a_resent_delivery_read_differently():
    delivery = deliveries(1)[0]
    now = timezone.now()
    first = log(delivery, 1, now - timedelta(hours=2))
    again = log(delivery, 1, now)  # after a resend, numbering starts again
    assert str(first) != str(again)
    assert str(again).startswith(f"attempt 1 of delivery #{delivery.pk} at ")


@pytest.mark.django_db
def test_each_batchs_attempts_add_to_the_endpoints_hourly_counts():
    """One upsert per batch: a first batch creates the hour's row, a later one adds to it
    (ON CONFLICT on PostgreSQL and SQLite, ON DUPLICATE KEY on MariaDB)."""
    from types import SimpleNamespace

    from django_outbox.models import EndpointHour
    from django_outbox.webhooks.policy import Verdict
    from django_outbox.webhooks.recording import tally

    endpoint = webhooks.create_endpoint("https://example.com/hook")
    at = timezone.now().replace(minute=30)

    def record(verdict: Verdict) -> SimpleNamespace:
        return SimpleNamespace(
            number=1,
            response=SimpleNamespace(started_at=at),
            delivery=SimpleNamespace(endpoint_id=endpoint.pk),
            decision=SimpleNamespace(verdict=verdict),
        )

    tally([record(Verdict.SUCCEEDED), record(Verdict.RETRY)])
    tally([record(Verdict.SUCCEEDED)] * 3)
    (row,) = EndpointHour.objects.filter(endpoint=endpoint)
    assert (row.hour, row.attempts, row.succeeded) == (
        at.replace(minute=0, second=0, microsecond=0),
        5,
        4,
    )
