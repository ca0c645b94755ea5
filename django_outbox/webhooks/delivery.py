"""Running one delivery on a worker thread, sharing its queries with the others.

    load (a first attempt: read ahead for the jobs behind it; a retry: gathered with the
    retries running about now, with their latest attempts) → the HTTP request (bounded
    per endpoint) → the attempt, handed to the worker to write with the job's outcome

The job engine then writes the jobs' outcomes and their attempts in its own batches: a
retry is a RetryAt (the schedule's time), the end a PermanentFailure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from django_outbox import conf, ratelimits, telemetry
from django_outbox.exceptions import EndpointDisabled, PermanentFailure, RateLimited, RetryAt
from django_outbox.jobs import readahead, sidewrites
from django_outbox.lib import text
from django_outbox.models import Attempt, Delivery, DeliveryStatus
from django_outbox.webhooks import attempts, fanout, http, policy, recording, secrets, signing
from django_outbox.webhooks.batching import Batcher, ReadAhead
from django_outbox.webhooks.policy import Decision, Verdict


@dataclass(slots=True)
class Loaded:
    delivery: Delivery
    latest: Attempt | None


def load(delivery_ids: list[int]) -> list[Loaded | None]:
    """Deliveries with their message and endpoint, and each one's latest attempt."""
    found = Delivery.objects.select_related("message", "endpoint").in_bulk(delivery_ids)
    present = [found[i] for i in dict.fromkeys(delivery_ids) if i in found]
    # A resend starts a new round: attempts before it do not count.
    keys = [attempts.Key(d.pk, d.resent_at or d.created_at) for d in present]
    latest = dict(zip([d.pk for d in present], attempts.latest(keys), strict=True))
    return [Loaded(found[i], latest[i]) if i in found else None for i in delivery_ids]


def load_first(delivery_ids: list[int]) -> list[Loaded | None]:
    """Deliveries on their job's first run: no attempt of this round can exist yet (the
    claim counts a job's runs, so a run cut short by a crash comes back as a retry), and
    none is looked up."""
    found = Delivery.objects.select_related("message", "endpoint").in_bulk(delivery_ids)
    return [Loaded(found[i], None) if i in found else None for i in delivery_ids]


#: A first attempt loads its delivery with those of the first attempts queued behind it
#: on its worker, which then find theirs loaded: one query for many, no one waiting.
#: A delivery read ahead more than half a second before its run starts is loaded
#: again: an endpoint disabled or a delivery changed meanwhile is seen as it is now.
loader: ReadAhead[int, Loaded | None] = ReadAhead(
    load_first, size=lambda: conf.get().WEBHOOKS.LOOKUP_BATCH_SIZE, fresh=0.5
)
#: Retries fall due one by one (their delays are jittered): they gather for the whole
#: LOOKUP_BATCH_WAIT_MS, so retries running at about the same time share one lookup.
retry_loader: Batcher[int, Loaded | None] = Batcher(
    load,
    size=lambda: conf.get().WEBHOOKS.LOOKUP_BATCH_SIZE,
    wait=lambda: conf.get().WEBHOOKS.LOOKUP_BATCH_WAIT_MS / 1000,
    lull=None,
)
#: Outside a worker, finished attempts gather for the whole linger: answers come back
#: spread out, and a lull ended their batches at two or three records.
recorder: Batcher[recording.Record, None] = Batcher(
    recording.write,
    size=lambda: 100,
    wait=lambda: recording.LINGER_SECONDS,
    lull=None,
)


def _record(record: recording.Record) -> None:
    """Log the attempt with the delivery job's outcome, in its transaction (a worker runs
    the job); else now, with the attempts finishing about now."""
    if not sidewrites.defer(recording.store, record):
        recorder.submit(record)


@dataclass(frozen=True, slots=True)
class Earlier:
    """The runs of a delivery's job before this one, when the last of them may have sent
    a request it never logged (its worker was lost, or its log write failed)."""

    runs: int
    #: When the job was enqueued: the attempts its runs logged are no older.
    since: datetime


def run(
    delivery_id: int,
    retry: bool = False,
    rate_turn: dict[str, float] | None = None,
    earlier: Earlier | None = None,
) -> str:
    """Attempt one delivery; returns what happened, or raises RetryAt / PermanentFailure,
    or RateLimited when its endpoint's rate limit holds it back.

    ``retry``: the delivery's job ran before (its lookup waits for other retries).
    ``rate_turn``: the turn under the endpoint's rate limit a held-back run reserved.
    ``earlier``: given, the job's earlier runs that logged no attempt are logged now, as
    interrupted (see ``log_interrupted``), before this run's attempt."""
    if retry:
        loaded = retry_loader.submit(delivery_id)
    else:
        loaded = loader.get(delivery_id, _first_attempts_ahead)
    if loaded is None:
        return f"delivery {delivery_id} no longer exists: nothing to send"
    delivery, latest = loaded.delivery, loaded.latest
    if delivery.status != DeliveryStatus.PENDING:
        return f"delivery {delivery_id} is {delivery.status} already: nothing to send"
    if latest is not None and latest.succeeded:
        # Sent and logged, but its worker stopped before the job was marked done.
        _record(recording.Record(delivery, None, None, Decision(Verdict.SUCCEEDED)))
        return f"attempt {latest.number} had succeeded already: not sent again"
    number = (latest.number if latest else 0) + 1
    if earlier is not None:
        number += log_interrupted(delivery, number, earlier)
    _wait_for_turn(delivery, number, rate_turn)
    with telemetry.attempt_span(delivery.endpoint.url, number):
        response = _attempt(delivery)
        succeeded = response.status_code is not None and 200 <= response.status_code < 300
        telemetry.attempt_answered(response.status_code, response.error_class, succeeded)
    decision = policy.decide(
        number,
        conf.get().WEBHOOKS.RETRY_SCHEDULE,
        response.status_code,
        final=response.final,
        retry_after=policy.parse_retry_after(response.retry_after, timezone.now()),
    )
    next_at = None
    if decision.delay is not None:
        next_at = timezone.now() + timedelta(seconds=decision.delay)
    _record(recording.Record(delivery, number, response, decision, next_at))
    return _conclude(delivery, number, response, decision, next_at)


#: The attempt log's entry for a run that may have sent a request and stopped before it
#: could log what came of it.
INTERRUPTED = "Interrupted"
INTERRUPTED_MESSAGE = (
    "no outcome was logged: the worker running this attempt stopped (it was killed, or "
    "lost its database) before it could log one; the endpoint may or may not have got "
    "the request"
)


def log_interrupted(delivery: Delivery, first: int, earlier: Earlier) -> int:
    """Log the job's earlier runs that logged no attempt as interrupted attempts, numbered
    from ``first``; returns how many.

    Every run of a delivery's job logs one attempt (a run held back by a rate limit does
    not count as a run), so runs without one are those cut short: each may have reached
    the endpoint, and the log must not hide a request the endpoint may have acted on.
    Idempotent: a run held back after this logs nothing, and the next run counts again."""
    logged = Attempt.objects.filter(delivery=delivery, started_at__gte=earlier.since).count()
    missing = max(0, earlier.runs - logged)
    if missing:
        now = timezone.now()
        Attempt.objects.bulk_create(
            Attempt(
                delivery=delivery,
                number=first + n,
                started_at=now,
                duration=0.0,
                error_class=INTERRUPTED,
                error_message=INTERRUPTED_MESSAGE,
            )
            for n in range(missing)
        )
        Delivery.objects.filter(pk=delivery.pk, attempts__lt=first + missing - 1).update(
            attempts=first + missing - 1, last_attempt_at=now
        )
    return missing


def _first_attempts_ahead() -> list[int]:
    """The deliveries of the first attempts queued behind this run on its worker."""
    ahead = []
    for job in readahead.upcoming(fanout.DELIVER_TASK, conf.get().WEBHOOKS.LOOKUP_BATCH_SIZE):
        if job.attempts == 1:
            delivery_id = job.args[0] if job.args else job.kwargs.get("delivery_id")
            if isinstance(delivery_id, int):
                ahead.append(delivery_id)
    return ahead


#: A reserved turn missed by more than this (the workers were away or behind) is not
#: simply taken: the delivery sends only if a token is free now, else reserves anew, so
#: deliveries held back meanwhile do not all go at once.
TURN_GRACE_SECONDS = 5.0


def _wait_for_turn(delivery: Delivery, number: int, turn: dict[str, float] | None) -> None:
    """Under its endpoint's rate limit: return when attempt ``number`` may be sent now,
    or raise RateLimited with the turn reserved for it.

    Every delivery over the limit reserves its own turn (one token, charged now), so a
    backlog goes out at the rate, each held-back delivery claimed once more, at its turn.
    ``turn`` is what a held-back run reserved: it holds for that attempt only."""
    endpoint = delivery.endpoint
    if not endpoint.rate_limit or not endpoint.active:
        return
    rate = ratelimits.Rate.of(endpoint.rate_limit)
    key = f"endpoint:{endpoint.pk}"
    now = time.time()
    if turn is not None and turn.get("attempt") == number:
        if now <= turn["at"] + max(rate.capacity, TURN_GRACE_SECONDS):
            return  # its turn, paid for when it was reserved
        if ratelimits.take(key, rate, 1).granted:
            return  # late, and a token is free now
    wait = ratelimits.reserve(key, rate)
    if wait <= 0:
        return
    at = now + wait
    raise RateLimited(
        datetime.fromtimestamp(at, tz=UTC),
        f"{endpoint.url} takes at most {text.number(endpoint.rate_limit)} requests per second: "
        f"attempt {number} held back {text.duration(wait)}",
        kwargs={"rate_turn": {"at": at, "attempt": number}},
    )


def _attempt(delivery: Delivery) -> http.Response:
    endpoint, message = delivery.endpoint, delivery.message
    if not endpoint.active:
        refused = http.Response(started_at=timezone.now(), final=True)
        refused.error_class = EndpointDisabled.__name__
        reason = endpoint.disabled_reason or "by hand"
        refused.error_message = (
            f"The endpoint is disabled ({reason}): nothing is sent to it until it is enabled again."
        )
        return refused
    options = conf.get().WEBHOOKS
    now = timezone.now()
    body = message.body.encode()
    try:
        signed = signing.headers(
            secrets.signing_secrets(endpoint, now), message.uid, int(now.timestamp()), body
        )
    except signing.SchemeUnavailable as exc:
        # Retried on the schedule: installing the package on the workers mends it.
        unsigned = http.Response(started_at=now)
        unsigned.error_class, unsigned.error_message = type(exc).__name__, str(exc)
        return unsigned
    # The endpoint's own headers first; the reserved names keep them from meeting ours.
    headers = {**(endpoint.headers or {}), **signed}
    with http.endpoint_slot(endpoint.pk):
        return http.post(
            endpoint.url,
            body,
            headers,
            timeout=endpoint.timeout or options.TIMEOUT,
            connect_timeout=options.CONNECT_TIMEOUT,
        )


def _conclude(
    delivery: Delivery,
    number: int,
    response: http.Response,
    decision: Decision,
    next_at: datetime | None,
) -> str:
    what = f"attempt {number} to {delivery.endpoint.url}: {response.summary}"
    if decision.verdict == Verdict.SUCCEEDED:
        return what
    if decision.verdict == Verdict.RETRY:
        assert decision.delay is not None and next_at is not None
        raise RetryAt(next_at, f"{what}; next attempt in {text.duration(decision.delay)}")
    if decision.verdict == Verdict.GONE:
        raise PermanentFailure(f"{what}; the endpoint is gone and was disabled")
    if response.final:
        raise PermanentFailure(f"{what}; not retried")
    raise PermanentFailure(f"{what}; that was the last attempt")
