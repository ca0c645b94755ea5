"""Ordered webhooks: ``send(ordering_key=...)`` against a real HTTP receiver on 127.0.0.1.

Test settings: a retry schedule of [0, 0.2, 0.2, 0.2] (four attempts, retries within
0.2 s).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from django_outbox import webhooks
from django_outbox.models import Delivery, DeliveryStatus, Job, LimitKey, Message
from tests.conftest import wait_until
from tests.receiver import Answer, Received

pytestmark = pytest.mark.django_db(transaction=True)


def data(request: Received) -> dict[str, Any]:
    return json.loads(request.body)["data"]  # type: ignore[no-any-return]


def arrivals(receiver: Any, path: str, key: str) -> list[int]:
    """The numbers of the messages of ``key`` that ``path`` answered 200 to, in order."""
    return [data(r)["n"] for r in receiver.at(path) if data(r)["key"] == key and r.status == 200]


def all_settled() -> bool:
    pending = Delivery.objects.filter(status=DeliveryStatus.PENDING).exists()
    active = Job.objects.filter(status__in=["held", "queued", "running"]).exists()
    return not pending and not active


def test_messages_of_a_key_arrive_in_order_while_other_keys_and_endpoints_overtake(
    receiver: Any, webhook_worker: Any
) -> None:
    tries = []

    def decide(request: Received) -> Answer | None:
        # The first message of key "a" fails three times at /one: it is retried, and holds
        # back the later messages of "a" to /one only. (Called under the receiver's lock.)
        if request.path == "/one" and data(request) == {"key": "a", "n": 0}:
            tries.append(request)
            if len(tries) <= 3:
                return Answer(500)
        return None

    receiver.decide = decide
    webhooks.create_endpoint(receiver.url("/one"))
    webhooks.create_endpoint(receiver.url("/two"))
    with transaction.atomic():
        for n in range(6):
            for key in ("a", "b", "c"):
                webhooks.send("order.changed", {"key": key, "n": n}, ordering_key=key)
    webhook_worker(concurrency=8)
    wait_until(all_settled, timeout=60, what="every delivery to settle")

    for path in ("/one", "/two"):
        for key in ("a", "b", "c"):
            assert arrivals(receiver, path, key) == list(range(6)), (path, key)
    one = receiver.at("/one")
    assert [r.status for r in one if data(r) == {"key": "a", "n": 0}] == [500, 500, 500, 200]
    a_recovered = next(r.started for r in one if data(r)["key"] == "a" and r.status == 200)
    # While "a" waited for its retries, other keys went on to their next messages at /one,
    # and "a" itself went on at /two.
    assert any(data(r)["key"] != "a" and data(r)["n"] > 0 for r in one if r.started < a_recovered)
    two = receiver.at("/two")
    assert any(data(r) == {"key": "a", "n": 1} for r in two if r.started < a_recovered)
    assert set(Delivery.objects.values_list("status", flat=True)) == {"succeeded"}


def test_a_message_that_fails_for_good_lets_its_key_go_on_and_a_resend_takes_its_turn(
    receiver: Any, webhook_worker: Any
) -> None:
    receiver.decide = lambda request: Answer(500) if data(request)["n"] == 0 else None
    endpoint = webhooks.create_endpoint(receiver.url("/hook"))
    for n in range(3):
        webhooks.send("order.changed", {"key": "k", "n": n}, ordering_key="k")
    webhook_worker()
    wait_until(all_settled, timeout=60, what="every delivery to settle")
    numbers = [data(r)["n"] for r in receiver.at("/hook")]
    assert numbers == [0, 0, 0, 0, 1, 2]  # four attempts of 0, then the rest in order
    first = Delivery.objects.get(message__body__contains='"n":0')
    assert first.status == DeliveryStatus.FAILED

    receiver.decide = None
    with transaction.atomic():
        assert webhooks.resend(first)
        webhooks.send("order.changed", {"key": "k", "n": 3}, ordering_key="k")
    wait_until(all_settled, timeout=60, what="the resend and the new message")
    assert [data(r)["n"] for r in receiver.at("/hook")][6:] == [0, 3]
    assert LimitKey.objects.get(key=f"sequence:outbox.webhook:{endpoint.pk}:k").held_by is None


def test_a_rollback_sends_nothing_and_takes_no_turn(receiver: Any) -> None:
    webhooks.create_endpoint(receiver.url("/hook"))
    with pytest.raises(RuntimeError), transaction.atomic():
        webhooks.send("order.changed", {"n": 0}, ordering_key="k")
        raise RuntimeError("the view failed")
    assert not Message.objects.exists() and not Job.objects.exists()
    webhooks.send("order.changed", {"n": 1}, ordering_key="k")
    assert list(Job.objects.values_list("status", flat=True)) == ["queued"]


@pytest.mark.parametrize("key", ["", 7, "k" * 201])
def test_a_bad_ordering_key_is_refused_and_nothing_is_sent(receiver: Any, key: object) -> None:
    webhooks.create_endpoint(receiver.url("/hook"))
    with pytest.raises(ValidationError, match="ordering_key must be a string of 1 to 200"):
        webhooks.send("order.changed", {}, ordering_key=key)  # type: ignore[arg-type]
    assert not Message.objects.exists() and not Job.objects.exists()
