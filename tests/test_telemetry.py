"""OpenTelemetry: spans and metrics through the SDK's in-memory exporter and reader.

The SDK's providers are global and can be set once per process: this module sets them for
the rest of the session (the tests after it run with tracing on, which they must survive).
"""

from __future__ import annotations

import pytest
from django.utils import timezone
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import django_outbox
from django_outbox import telemetry, webhooks
from django_outbox.models import Job
from tests import tasks
from tests.receiver import Answer

pytestmark = pytest.mark.django_db

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def sdk():
    if not telemetry.tracing():
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    yield


@pytest.fixture
def spans():
    EXPORTER.clear()
    READER.get_metrics_data()  # start the test's counts from here (cumulative: see below)
    return EXPORTER


def points(name: str) -> dict[tuple, float]:
    """Each data point of metric ``name`` now: {attributes as a sorted tuple: value}."""
    found = {}
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    key = tuple(sorted(point.attributes.items()))
                    found[key] = getattr(point, "value", None) or getattr(point, "count", 0)
    return found


def test_the_run_span_is_a_child_of_the_enqueue_span_through_the_job(run_worker, spans):
    with trace.get_tracer("test").start_as_current_span("the request"):
        result = tasks.add.enqueue(2, 3)
    stored = Job.objects.for_result(result.id).get().trace_context
    assert stored and "traceparent" in stored
    run_worker()
    by_name = {span.name: span for span in spans.get_finished_spans()}
    request = by_name["the request"]
    enqueue = by_name["outbox enqueue tests.tasks.add"]
    run = by_name["outbox run tests.tasks.add"]
    assert enqueue.kind == SpanKind.PRODUCER and run.kind == SpanKind.CONSUMER
    assert enqueue.parent.span_id == request.context.span_id
    assert run.parent.span_id == enqueue.context.span_id
    assert run.context.trace_id == request.context.trace_id
    assert run.attributes["messaging.message.id"] == result.id
    assert run.attributes["outbox.attempt"] == 1
    assert run.status.status_code == StatusCode.UNSET


def test_a_failed_run_has_an_error_span_and_each_retry_joins_the_trace(run_worker, spans):
    failing = tasks.always_fails.enqueue("nope")
    Job.objects.for_result(failing.id).update(max_attempts=2)
    run_worker()
    Job.objects.for_result(failing.id).update(run_at=timezone.now())  # its retry, now
    run_worker()
    runs = [
        s for s in spans.get_finished_spans() if s.name == "outbox run tests.tasks.always_fails"
    ]
    assert [r.attributes["outbox.attempt"] for r in runs] == [1, 2]
    assert {r.status.status_code for r in runs} == {StatusCode.ERROR}
    assert {r.attributes["error.type"] for r in runs} == {"builtins.ValueError"}
    assert len({r.context.trace_id for r in runs}) == 1


def test_enqueue_many_is_one_span_and_every_job_carries_it(spans):
    django_outbox.enqueue_many(tasks.noop, [((), {})] * 3)
    (enqueue,) = [s for s in spans.get_finished_spans() if s.name.startswith("outbox enqueue")]
    assert enqueue.attributes["messaging.batch.message_count"] == 3
    contexts = {str(c) for c in Job.objects.values_list("trace_context", flat=True)}
    assert len(contexts) == 1 and f"{enqueue.context.trace_id:032x}" in contexts.pop()


def test_job_metrics_count_outcomes_and_time_runs(run_worker, spans):
    before = {
        name: points(name)
        for name in ("outbox.jobs.enqueued", "outbox.jobs.succeeded", "outbox.jobs.failed")
    }
    django_outbox.enqueue_many(tasks.add, [((1, 1), {})] * 4)
    failing = tasks.always_fails.enqueue("x")
    Job.objects.for_result(failing.id).update(max_attempts=1)
    run_worker()
    add = (("queue", "default"), ("task", "tests.tasks.add"))
    fails = (("queue", "default"), ("task", "tests.tasks.always_fails"))

    def grew(name, key):
        return points(name).get(key, 0) - before.get(name, {}).get(key, 0)

    assert grew("outbox.jobs.enqueued", add) == 4
    assert grew("outbox.jobs.succeeded", add) == 4
    assert grew("outbox.jobs.failed", fails) == 1
    assert points("outbox.job.run_time")[add] >= 4  # histogram counts, cumulative
    assert points("outbox.job.pickup_latency")[add] >= 4


def test_queue_depth_is_read_when_collected(spans):
    django_outbox.enqueue_many(tasks.noop.using(queue_name="reports"), [((), {})] * 2)
    assert points("outbox.queue.depth")[(("queue", "reports"),)] == 2


def test_a_webhook_attempt_has_a_client_span_and_is_counted(receiver, webhook_worker, spans):
    receiver.script("/hook", Answer(500), Answer(200))
    webhooks.create_endpoint(receiver.url())
    before = points("outbox.webhook.attempts")
    webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    from tests.conftest import wait_until

    wait_until(lambda: len(receiver.at("/hook")) == 2, what="two attempts")
    wait_until(
        lambda: len([s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]) == 2,
        what="two attempt spans",
    )
    attempts = [s for s in spans.get_finished_spans() if s.name == "outbox webhook attempt"]
    assert [s.attributes["http.response.status_code"] for s in attempts] == [500, 200]
    assert [s.status.status_code for s in attempts] == [StatusCode.ERROR, StatusCode.UNSET]
    after = points("outbox.webhook.attempts")
    for outcome in ("http_error", "succeeded"):
        key = (("outcome", outcome),)
        assert after.get(key, 0) - before.get(key, 0) == 1


def test_a_webhook_delivery_run_joins_the_trace_of_the_send(receiver, webhook_worker, spans):
    webhooks.create_endpoint(receiver.url("/traced"))
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("the view that sends"):
        webhooks.send("invoice.paid", {"id": 1})
    job = Job.objects.get(task_path="django_outbox.webhooks.tasks.deliver")
    assert job.trace_context and "traceparent" in job.trace_context
    webhook_worker()
    from tests.conftest import wait_until

    wait_until(lambda: len(receiver.at("/traced")) == 1, what="the delivery")
    view = next(s for s in spans.get_finished_spans() if s.name == "the view that sends")
    run = wait_until(
        lambda: next((s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER), None),
        what="the delivery's run span",
    )
    assert run.context.trace_id == view.context.trace_id
