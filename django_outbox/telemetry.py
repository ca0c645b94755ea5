"""OpenTelemetry traces and metrics, when the application has set them up (docs/telemetry.md).

Only ``opentelemetry-api`` is used (the ``otel`` extra); the application chooses the SDK,
its exporters and where they send. Until it sets a tracer provider (or a meter provider),
every function here returns at once: no span is started, nothing is measured, and the
worker's hot path pays one ``isinstance`` per job.

Traces: a span for each enqueue (``outbox enqueue <task>``, PRODUCER), whose context is
stored with the job (W3C trace context, ``Job.trace_context``); a span for each run
(``outbox run <task>``, CONSUMER) in the same trace, as its child; a span for each webhook
attempt (``outbox webhook attempt``, CLIENT).

Metrics (all prefixed ``outbox.``): ``jobs.enqueued``, ``jobs.succeeded``, ``jobs.failed``,
``jobs.retried`` (counters by queue and task), ``job.pickup_latency`` and
``job.run_time`` (histograms, seconds, by queue and task), ``queue.depth`` (jobs due now,
by queue, read when the metrics are collected), ``webhook.attempts`` (counter by outcome).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.metrics import _internal as _metrics_api
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed: everything here does nothing
    trace = None  # type: ignore[assignment]

NAME = "django_outbox"


def tracing() -> bool:
    """Has the application set a tracer provider? (Without one, spans go nowhere.)"""
    if trace is None or _unset(trace, "_TRACER_PROVIDER", "OTEL_PYTHON_TRACER_PROVIDER"):
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def measuring() -> bool:
    """Has the application set a meter provider?"""
    if trace is None or _unset(_metrics_api, "_METER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER"):
        return False
    provider = metrics.get_meter_provider()
    return not (
        isinstance(provider, metrics.NoOpMeterProvider)
        or type(provider).__name__ == "_ProxyMeterProvider"
    )


_MISSING = object()


def _unset(module: Any, name: str, variable: str) -> bool:
    """Surely no provider yet: the API's global is still None and no environment variable
    names one. The API's own getter looks the variable up in ``os.environ`` at every call
    until a provider is set, which cost each job more than the rest of this module; should
    the global be renamed in a later API, this says "not sure" and the getter decides."""
    return getattr(module, name, _MISSING) is None and variable not in _ENVIRONMENT


#: The environment at import: a provider named there is loaded at the getter's first call.
_ENVIRONMENT = frozenset(os.environ)


# Enqueue


@contextmanager
def enqueue_span(
    task_path: str, queue: str, count: int | None = 1
) -> Iterator[dict[str, str] | None]:
    """Around an enqueue of ``count`` jobs (None: not known before the insert): yields the
    trace context to store with them (None when not tracing)."""
    if not tracing():
        yield None
        return
    attributes: dict[str, str | int] = {
        "messaging.system": "django_outbox",
        "messaging.operation.type": "publish",
        "messaging.destination.name": queue,
        "outbox.task": task_path,
    }
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    with _tracer().start_as_current_span(
        f"outbox enqueue {task_path}", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield carrier


def enqueued(task_path: str, queue: str, count: int = 1) -> None:
    """``count`` jobs were enqueued (in the caller's transaction: a rollback still counts)."""
    if measuring():
        _instruments().enqueued.add(count, {"queue": queue, "task": task_path})


# Runs


def run_span(
    task_path: str, queue: str, result_id: str, attempt: int, carrier: dict[str, str] | None
) -> AbstractContextManager[Any]:
    """Around one run of a job (``result_id``: its ``TaskResult.id``): a span in the trace
    its enqueue started (a root span for a job enqueued without one)."""
    if not tracing():
        return nullcontext()
    parent = propagate.extract(carrier) if carrier else otel_context.Context()
    return _tracer().start_as_current_span(
        f"outbox run {task_path}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "django_outbox",
            "messaging.operation.type": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": str(result_id),
            "outbox.task": task_path,
            "outbox.attempt": attempt,
        },
        record_exception=False,  # the job's error is recorded below, as the job saw it
        set_status_on_exception=False,
    )


def run_failed(error: dict[str, str] | None) -> None:
    """Mark the current run span failed, with the job's error class."""
    if error is None or not tracing():
        return
    span = trace.get_current_span()
    span.set_attribute("error.type", error["exception_class_path"])
    span.set_status(Status(StatusCode.ERROR, error["exception_class_path"]))


def run_timed(task_path: str, queue: str, pickup: float | None, seconds: float) -> None:
    """One run's pickup latency (due to started, first attempts only) and run time."""
    if not measuring():
        return
    labels = {"queue": queue, "task": task_path}
    instruments = _instruments()
    if pickup is not None:
        instruments.pickup.record(max(0.0, pickup), labels)
    instruments.run_time.record(seconds, labels)


def ended(task_path: str, queue: str, outcome: str) -> None:
    """A run recorded as ``succeeded``, ``failed`` or ``retried``."""
    if not measuring():
        return
    counter = getattr(_instruments(), outcome)
    counter.add(1, {"queue": queue, "task": task_path})


# Webhooks


def attempt_span(url: str, number: int) -> AbstractContextManager[Any]:
    """Around one webhook request."""
    if not tracing():
        return nullcontext()
    return _tracer().start_as_current_span(
        "outbox webhook attempt",
        kind=SpanKind.CLIENT,
        attributes={"url.full": url, "http.request.method": "POST", "outbox.attempt": number},
    )


def attempt_answered(status_code: int | None, error_class: str, succeeded: bool) -> None:
    """What the current attempt came to: on its span, and counted by outcome."""
    outcome = "succeeded" if succeeded else ("http_error" if status_code else "no_answer")
    if tracing():
        span = trace.get_current_span()
        if status_code is not None:
            span.set_attribute("http.response.status_code", status_code)
        if not succeeded:
            span.set_attribute("error.type", error_class or str(status_code))
            span.set_status(Status(StatusCode.ERROR))
    if measuring():
        _instruments().attempts.add(1, {"outcome": outcome})


# Instruments


def _tracer() -> Any:
    return trace.get_tracer(NAME)


class _Instruments:
    def __init__(self, meter: Any) -> None:
        self.enqueued = meter.create_counter(
            "outbox.jobs.enqueued", unit="{job}", description="Jobs enqueued."
        )
        self.succeeded = meter.create_counter(
            "outbox.jobs.succeeded", unit="{job}", description="Runs that succeeded."
        )
        self.failed = meter.create_counter(
            "outbox.jobs.failed", unit="{job}", description="Jobs failed for good."
        )
        self.retried = meter.create_counter(
            "outbox.jobs.retried", unit="{job}", description="Runs that failed and will retry."
        )
        self.pickup = meter.create_histogram(
            "outbox.job.pickup_latency",
            unit="s",
            description="From a job's due time to its first run's start.",
        )
        self.run_time = meter.create_histogram(
            "outbox.job.run_time", unit="s", description="How long a run took."
        )
        self.attempts = meter.create_counter(
            "outbox.webhook.attempts", unit="{attempt}", description="Webhook attempts."
        )
        meter.create_observable_gauge(
            "outbox.queue.depth",
            callbacks=[_queue_depth],
            unit="{job}",
            description="Jobs due now and not yet claimed.",
        )


_made: dict[int, _Instruments] = {}


def _instruments() -> _Instruments:
    """The instruments of the current meter provider (made once per provider)."""
    provider = metrics.get_meter_provider()
    found = _made.get(id(provider))
    if found is None:
        found = _made[id(provider)] = _Instruments(provider.get_meter(NAME))
    return found


def _queue_depth(options: Any) -> Iterable[Any]:
    """Jobs due now, by queue: read when the metric reader collects, on its own thread."""
    from django.db import connection
    from django.db.models import Count
    from django.utils import timezone

    from django_outbox.models import Job, JobStatus

    try:
        rows = (
            Job.objects.filter(status=JobStatus.QUEUED, run_at__lte=timezone.now())
            .values("queue")
            .annotate(n=Count("id"))
        )
        return [metrics.Observation(row["n"], {"queue": row["queue"]}) for row in rows]
    except Exception:
        return []  # no database now: no figure, rather than a failed collection
    finally:
        if not connection.in_atomic_block:
            with suppress(Exception):
                connection.close()  # the reader's thread keeps no connection
