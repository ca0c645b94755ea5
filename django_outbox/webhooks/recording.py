"""Writing a batch of attempt results: one bulk insert of attempts, one update of their
deliveries and one upsert of their endpoints' hourly counts, in one transaction; then the
endpoints' health (reset on success, counted on failure, disabled when gone or failing
for too long); then the signals."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections, router, transaction
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from django_outbox import conf
from django_outbox.db import dialect, named
from django_outbox.db.inserts import insert_rows
from django_outbox.db.rowvalues import among, per_row
from django_outbox.jobs.returning import update_returning
from django_outbox.lib import text
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Endpoint, EndpointHour
from django_outbox.webhooks import signals
from django_outbox.webhooks.http import Response
from django_outbox.webhooks.policy import Decision, Verdict

logger = logging.getLogger("django_outbox.webhooks")

#: Longest a finished attempt waits for others to be written with it.
LINGER_SECONDS = 0.02

_STATUS = {
    Verdict.SUCCEEDED: DeliveryStatus.SUCCEEDED,
    Verdict.RETRY: DeliveryStatus.PENDING,
    Verdict.FAILED: DeliveryStatus.FAILED,
    Verdict.GONE: DeliveryStatus.FAILED,
}


@dataclass(slots=True)
class Record:
    delivery: Delivery
    #: The attempt's number; None when nothing was sent (an earlier attempt had succeeded).
    number: int | None
    response: Response | None
    decision: Decision
    next_attempt_at: datetime | None = None


#: The attempt log's columns, in the order ``_attempt_row`` gives them.
_ATTEMPT_FIELDS = (
    "delivery",
    "number",
    "started_at",
    "duration",
    "succeeded",
    "status_code",
    "response_headers",
    "response_body",
    "error_class",
    "error_message",
)


def _attempt_row(r: Record) -> tuple[Any, ...]:
    response = r.response
    assert response is not None
    return (
        r.delivery.pk,
        r.number,
        response.started_at,
        response.duration,
        r.decision.verdict == Verdict.SUCCEEDED,
        response.status_code,
        response.headers,
        response.body,
        response.error_class,
        response.error_message,
    )


def write(records: list[Record]) -> list[None]:
    """Write the records in a transaction of their own, then what follows them."""
    with transaction.atomic(using=router.db_for_write(Attempt)):
        then = store(records)
    then()
    return [None] * len(records)


def store(records: list[Record]) -> Callable[[], None]:
    """Write the records in the transaction open now (a worker's, which also stores the
    delivery jobs' outcomes: see jobs/sidewrites.py); returns what must follow once it
    commits: the endpoints' health and the signals."""
    now = timezone.now()
    sent = [r for r in records if r.number is not None and r.response is not None]
    ids = insert_rows("attempt-log", Attempt, _ATTEMPT_FIELDS, [_attempt_row(r) for r in sent])
    _update_deliveries(records)
    tally(records)

    def then() -> None:
        # The endpoints' health is advice: written after the attempts, one autocommit
        # statement at a time (no transaction holding several endpoints' locks, so
        # concurrent batches cannot deadlock), and a failure here is logged, never a
        # reason to send again.
        try:
            disabled = _update_endpoints(records, now)
        except DatabaseError as exc:
            logger.warning("webhooks: could not update the endpoints' failure counts (%s)", exc)
            disabled = []
        _send_signals(records, dict(zip([id(r) for r in sent], ids, strict=True)), disabled)

    return then


def _update_deliveries(records: Sequence[Record]) -> None:
    """One UPDATE of the batch's deliveries (written out, not compiled by the ORM: see
    db/inserts.py)."""
    using = router.db_for_write(Delivery)
    connection = connections[using]
    quote = connection.ops.quote_name
    sent = [r for r in records if r.number is not None and r.response is not None]
    values = {
        "status": per_row(
            using, [(r.delivery.pk, _STATUS[r.decision.verdict].value) for r in records], "text"
        ),
        "next_attempt_at": per_row(
            using, [(r.delivery.pk, r.next_attempt_at) for r in records], "datetime"
        ),
    }
    if sent:
        values["attempts"] = per_row(
            using, [(r.delivery.pk, r.number) for r in sent], "int", default="attempts"
        )
        values["last_attempt_at"] = per_row(
            using,
            [(r.delivery.pk, r.response.started_at) for r in sent if r.response],
            "datetime",
            default="last_attempt_at",
        )
    ids, ids_params = among(using, quote("id"), [r.delivery.pk for r in records])
    params: list[Any] = []
    for value in values.values():
        params += value.params
    assignments = ", ".join(f"{quote(name)} = {value.sql}" for name, value in values.items())
    # Only a pending delivery, and never with an older attempt than it has: a run that lost
    # its lease (its worker cut off for longer) must not undo what a newer run wrote.
    where = f"{ids} AND {quote('status')} = %s"
    where_params = [*ids_params, DeliveryStatus.PENDING.value]
    if sent:
        where += f" AND {values['attempts'].sql} >= {quote('attempts')}"
        where_params += values["attempts"].params
    with connection.cursor() as cursor:
        cursor.execute(
            named(
                "delivery-update",
                f"UPDATE {quote(Delivery._meta.db_table)} SET {assignments} WHERE {where}",
            ),
            [*params, *where_params],
        )


def tally(records: Sequence[Record]) -> None:
    """Add the batch's attempts to each endpoint's hourly counts: one upsert.

    Rows go in (endpoint, hour) order, so two batches upserting the same rows take their
    locks in the same order and cannot deadlock."""
    counts: defaultdict[tuple[int, datetime], list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        if r.number is None or r.response is None:
            continue
        hour = r.response.started_at.replace(minute=0, second=0, microsecond=0)
        count = counts[(r.delivery.endpoint_id, hour)]
        count[0] += 1
        count[1] += r.decision.verdict == Verdict.SUCCEEDED
    if not counts:
        return
    using = router.db_for_write(EndpointHour)
    connection = connections[using]
    table = connection.ops.quote_name(EndpointHour._meta.db_table)
    rows = sorted(counts.items())
    params: list[Any] = []
    for (endpoint_id, hour), (attempts, succeeded) in rows:
        params += [endpoint_id, connection.ops.adapt_datetimefield_value(hour), attempts, succeeded]
    sql = dialect(using).upsert_adding(
        table,
        ["endpoint_id", "hour", "attempts", "succeeded"],
        len(rows),
        ["attempts", "succeeded"],
    )
    with connection.cursor() as cursor:
        cursor.execute(named("hour-tally", sql), params)


def _update_endpoints(records: Sequence[Record], now: datetime) -> list[tuple[Endpoint, str]]:
    """Reset, count and disable endpoints; returns those disabled, with the reason."""
    options = conf.get().WEBHOOKS
    succeeded = {r.delivery.endpoint_id for r in records if r.decision.verdict == Verdict.SUCCEEDED}
    failures: defaultdict[int, int] = defaultdict(int)
    gone: set[int] = set()
    for r in records:
        if r.number is None or r.delivery.endpoint_id in succeeded:
            continue
        if r.decision.verdict == Verdict.GONE:
            gone.add(r.delivery.endpoint_id)
        elif r.decision.verdict in (Verdict.RETRY, Verdict.FAILED):
            failures[r.delivery.endpoint_id] += 1
    # Only endpoints that were failing when their deliveries were loaded, a moment ago,
    # have a count to reset: a success usually costs no statement here. (A failure
    # recorded by another worker in that moment is reset by the endpoint's next success.)
    was_failing = {
        r.delivery.endpoint_id
        for r in records
        if r.delivery.endpoint_id in succeeded
        and (r.delivery.endpoint.failing_since or r.delivery.endpoint.consecutive_failures)
    }
    if was_failing:
        Endpoint.objects.filter(pk__in=was_failing).filter(
            Q(failing_since__isnull=False) | Q(consecutive_failures__gt=0)
        ).update(failing_since=None, consecutive_failures=0)
    disabled: list[tuple[Endpoint, str]] = []
    if failures:
        Endpoint.objects.filter(pk__in=failures).update(
            failing_since=Coalesce(F("failing_since"), Value(now)),
            consecutive_failures=F("consecutive_failures")
            + Case(
                *[When(pk=pk, then=Value(n)) for pk, n in failures.items()],
                output_field=IntegerField(),
            ),
        )
        window = timedelta(seconds=options.DISABLE_AFTER_SECONDS)
        disabled += _disable(
            Endpoint.objects.filter(
                pk__in=failures,
                active=True,
                failing_since__lte=now - window,
                consecutive_failures__gte=options.DISABLE_AFTER_ATTEMPTS,
            ),
            failing_reason(),
            now,
        )
    if gone:
        disabled += _disable(
            Endpoint.objects.filter(pk__in=gone, active=True),
            "the endpoint answered 410 Gone",
            now,
        )
    return disabled


def _disable(endpoints: object, reason: str, now: datetime) -> list[tuple[Endpoint, str]]:
    rows = update_returning(
        "endpoint-disable",
        endpoints.using(router.db_for_write(Endpoint)),  # type: ignore[attr-defined]
        {"active": False, "disabled_reason": reason, "disabled_at": now},
        ["id"],
    )
    if not rows:
        return []
    found = Endpoint.objects.in_bulk([row["id"] for row in rows])
    return [(endpoint, reason) for endpoint in found.values()]


def failing_reason() -> str:
    """Why an endpoint failing for its window was disabled (shown after "disabled: ")."""
    options = conf.get().WEBHOOKS
    return (
        f"every attempt failed for {text.duration(options.DISABLE_AFTER_SECONDS)}, "
        f"{options.DISABLE_AFTER_ATTEMPTS:,} or more in a row"
    )


def _send_signals(
    records: Sequence[Record], ids: dict[int, int], disabled: list[tuple[Endpoint, str]]
) -> None:
    """``ids``: the new attempt's primary key by id() of its record."""
    for r in records:
        verdict = r.decision.verdict
        if verdict == Verdict.RETRY:
            signal = signals.webhook_delivery_failed
        elif verdict in (Verdict.FAILED, Verdict.GONE):
            signal = signals.webhook_delivery_exhausted
        elif verdict == Verdict.SUCCEEDED and (r.number or 0) > 1:
            signal = signals.webhook_delivery_recovered
        else:
            continue
        attempt = None
        if id(r) in ids:  # built only for a signal: the usual success sends none
            row = _attempt_row(r)
            attempt = Attempt(
                id=ids[id(r)],
                delivery=r.delivery,
                **dict(zip(_ATTEMPT_FIELDS[1:], row[1:], strict=True)),
            )
        signal.send(Delivery, delivery=r.delivery, attempt=attempt)
    for endpoint, reason in disabled:
        signals.webhook_endpoint_disabled.send(Endpoint, endpoint=endpoint, reason=reason)
