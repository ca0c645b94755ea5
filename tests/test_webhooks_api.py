"""Endpoints, send() and its fan-out, and the operations, against the real database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.lib.resultids import TOKEN_MAX
from django_outbox.models import Delivery, DeliveryStatus, Endpoint, Job, JobStatus, Message
from django_outbox.webhooks import fanout
from tests.statements import names

pytestmark = pytest.mark.django_db(transaction=True)

URL = "https://hooks.example.com/in"


def endpoints(count: int, **options) -> list[Endpoint]:
    return [webhooks.create_endpoint(f"{URL}/{i}", **options) for i in range(count)]


def test_create_endpoint_gives_it_a_fresh_secret():
    first, second = endpoints(2, tenant="acme", event_types=["invoice.*"])
    assert first.secret.startswith("whsec_") and first.secret != second.secret
    assert Endpoint.objects.get(pk=first.pk).event_types == ["invoice.*"]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/in", "not a valid"),
        ("not a url", "not a valid"),
        ("https://127.0.0.1/in", "loopback"),
        ("https://10.1.2.3/in", "private"),
        ("https://[::1]/in", "loopback"),
        ("https://[::ffff:10.0.0.1]/in", "private"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://2130706433/in", "loopback"),  # decimal 127.0.0.1
        ("https://0x7f.1/in", "loopback"),  # hex and short form
        ("https://0177.0.0.1/in", "loopback"),  # octal
        ("https://[fd00::1]/in", "unique-local"),
        ("https://0.0.0.0/in", "unspecified"),
    ],
)
def test_create_endpoint_refuses_urls_that_are_not_public_http(url, why):
    with override_settings(OUTBOX={"WEBHOOKS": {}}), pytest.raises(ValidationError, match=why):
        webhooks.create_endpoint(url)
    assert not Endpoint.objects.exists()


def test_http_needs_allow_http_and_private_networks_need_allowing():
    with override_settings(OUTBOX={"WEBHOOKS": {}}), pytest.raises(ValidationError, match="https"):
        webhooks.create_endpoint("http://hooks.example.com/in")
    allowed = {"WEBHOOKS": {"ALLOW_HTTP": True, "ALLOWED_NETWORKS": ["10.0.0.0/8"]}}
    with override_settings(OUTBOX=allowed):
        assert webhooks.create_endpoint("http://10.1.2.3/in").pk


@pytest.mark.parametrize(
    "options",
    [
        {"event_types": "invoice.*"},
        {"event_types": ["invoice paid"]},
        {"event_types": ["invoice.%"]},
        {"timeout": 0},
        {"timeout": 3600},
        {"tenant": None},
        {"secret": "not-a-secret"},
    ],
)
def test_create_endpoint_refuses_bad_options_and_stores_nothing(options):
    with pytest.raises(ValidationError):
        webhooks.create_endpoint(URL, **options)
    assert not Endpoint.objects.exists()


def test_send_fans_out_to_matching_endpoints_of_the_tenant_with_one_job_each():
    every = webhooks.create_endpoint(URL + "/all", tenant="acme")
    invoices = webhooks.create_endpoint(URL + "/inv", tenant="acme", event_types=["invoice.*"])
    paid = webhooks.create_endpoint(URL + "/paid", tenant="acme", event_types=["*.paid"])
    webhooks.create_endpoint(URL + "/users", tenant="acme", event_types=["user.*"])
    webhooks.create_endpoint(URL + "/other", tenant="globex")
    webhooks.create_endpoint(URL + "/case", tenant="acme", event_types=["INVOICE.*"])
    underscore = webhooks.create_endpoint(URL + "/u", tenant="acme", event_types=["invoice_paid"])
    off = webhooks.create_endpoint(URL + "/off", tenant="acme")
    webhooks.disable(off)

    message = webhooks.send("invoice.paid", {"id": 1}, tenant="acme")

    reached = set(Delivery.objects.filter(message=message).values_list("endpoint_id", flat=True))
    assert reached == {every.pk, invoices.pk, paid.pk}
    assert underscore.pk not in reached  # "_" is a plain character, not a wildcard
    jobs = Job.objects.filter(queue="webhooks", status=JobStatus.QUEUED)
    deliveries = {d.pk for d in Delivery.objects.filter(message=message)}
    assert sorted(j.args[0] for j in jobs) == sorted(deliveries)
    assert {j.dedup_key for j in jobs} == {f"{fanout.DEDUP_PREFIX}{d}" for d in deliveries}


def test_each_job_of_a_fan_out_gets_a_random_token_of_its_own():
    endpoints(20)
    message = webhooks.send("invoice.paid", {"id": 1})
    keys = [f"{fanout.DEDUP_PREFIX}{pk}" for pk in message.deliveries.values_list("pk", flat=True)]
    tokens = list(Job.objects.filter(dedup_key__in=keys).values_list("token", flat=True))
    assert len(tokens) == 20 and all(1 <= token <= TOKEN_MAX for token in tokens)
    assert len(set(tokens)) > 15  # drawn per row by the INSERT … SELECT


def test_the_body_is_a_standard_webhooks_envelope_stored_as_sent():
    message = webhooks.send("user.created", {"name": "Zoë", "n": 1.5})
    import json

    body = json.loads(message.body)
    assert body["type"] == "user.created" and body["data"] == {"name": "Zoë", "n": 1.5}
    assert body["timestamp"].endswith("Z")
    assert message.uid.startswith("msg_")
    assert Message.objects.get(pk=message.pk).body == message.body


def test_send_runs_the_same_statements_whatever_the_fan_out():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    statements = {}
    for count in (1, 10, 500):
        tenant = f"t{count}"
        Endpoint.objects.bulk_create(
            Endpoint(url=f"{URL}/{i}", secret="whsec_x", tenant=tenant) for i in range(count)
        )
        with CaptureQueriesContext(connection) as queries:
            message = webhooks.send("invoice.paid", {"id": 1}, tenant=tenant)
        # Wake-ups are coalesced per 50 ms, so whether a NOTIFY went now varies: skip it.
        sent = [name for name in names(queries) if name != "wake"]
        statements[count] = len(sent)
        assert [name for name in sent if name] == ["fan-out", "enqueue-select"]
        assert Delivery.objects.filter(message=message).count() == count
        keys = [
            f"{fanout.DEDUP_PREFIX}{pk}" for pk in message.deliveries.values_list("pk", flat=True)
        ]
        assert Job.objects.filter(dedup_key__in=keys).count() == count
    # BEGIN, the message, the deliveries, the jobs, COMMIT.
    assert statements[1] == statements[10] == statements[500] == 5, statements
    # In the caller's transaction, a send is those three statements and no savepoint.
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        webhooks.send("invoice.paid", {"id": 2}, tenant="t10")
    sent = [q["sql"] for q in queries if "outbox:wake" not in q["sql"]]
    assert len(sent) == 3 and not any("SAVEPOINT" in sql for sql in sent), sent


def test_a_rollback_sends_nothing():
    endpoints(3)
    with pytest.raises(RuntimeError), transaction.atomic():
        webhooks.send("invoice.paid", {"id": 1})
        raise RuntimeError("rolled back")
    assert not Message.objects.exists()
    assert not Delivery.objects.exists() and not Job.objects.exists()


def test_a_repeated_idempotency_key_returns_the_first_message_and_sends_nothing_new():
    endpoints(2, tenant="acme")
    first = webhooks.send("invoice.paid", {"id": 1}, tenant="acme", idempotency_key="paid-1")
    again = webhooks.send("invoice.paid", {"id": 99}, tenant="acme", idempotency_key="paid-1")
    assert again.pk == first.pk
    assert Delivery.objects.count() == 2 and Job.objects.count() == 2
    other = webhooks.send("invoice.paid", {"id": 1}, tenant="globex", idempotency_key="paid-1")
    assert other.pk != first.pk  # keys are per tenant


@pytest.mark.parametrize(
    ("args", "kwargs", "why"),
    [
        (("invoice paid", {}), {}, "not an event type"),
        (("", {}), {}, "not an event type"),
        (("invoice.*", {}), {}, "not an event type"),
        (("x.y", {"when": timezone.now()}), {}, "cannot be sent as JSON"),
        (("x.y", {"bad": "\x00"}), {}, "NUL"),
        (("x.y", float("nan")), {}, "cannot be sent as JSON"),
        (("x.y", {}), {"tenant": 5}, "tenant"),
        (("x.y", {}), {"idempotency_key": ""}, "idempotency_key"),
        (("x.y", {}), {"idempotency_key": "k" * 256}, "idempotency_key"),
    ],
)
def test_send_refuses_bad_input_and_stores_nothing(args, kwargs, why):
    endpoints(1)
    with pytest.raises(ValidationError, match=why):
        webhooks.send(*args, **kwargs)
    assert not Message.objects.exists() and not Job.objects.exists()


def test_send_test_reaches_one_endpoint_whatever_its_filter():
    target, _other = endpoints(2, event_types=["invoice.*"])
    message = webhooks.send_test(target)
    assert message.event_type == "webhook.test"
    assert list(Delivery.objects.values_list("endpoint_id", flat=True)) == [target.pk]


def test_resend_recover_and_replay_queue_one_job_per_delivery():
    first, second = endpoints(2)
    message = webhooks.send("invoice.paid", {"id": 1})
    delivery = Delivery.objects.get(message=message, endpoint=first)
    assert webhooks.resend(delivery) is False  # its job is still queued: no second one
    Job.objects.update(status=JobStatus.FAILED)
    Delivery.objects.update(status=DeliveryStatus.FAILED)
    assert webhooks.resend(delivery) is True
    assert Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.PENDING

    assert webhooks.recover(second, since=timezone.now() - timedelta(hours=1)) == 1
    assert webhooks.recover(second, since=timezone.now() - timedelta(hours=1)) == 0
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 2

    newcomer = webhooks.create_endpoint(URL + "/new")
    replayed = webhooks.replay(message, newcomer)
    assert replayed.endpoint_id == newcomer.pk and replayed.status == DeliveryStatus.PENDING
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 3


def test_enable_disable_and_rotate_secret():
    (endpoint,) = endpoints(1)
    webhooks.disable(endpoint, "maintenance")
    assert not webhooks.send("a.b", {}).deliveries.exists()
    endpoint.refresh_from_db()
    assert (endpoint.active, endpoint.disabled_reason) == (False, "maintenance")
    webhooks.enable(endpoint)
    assert webhooks.send("a.b", {}).deliveries.count() == 1
    old = endpoint.secret
    new = webhooks.rotate_secret(endpoint, grace=timedelta(hours=1))
    endpoint.refresh_from_db()
    assert (endpoint.secret, endpoint.previous_secret) == (new, old)
    assert endpoint.previous_secret_expires_at > timezone.now() + timedelta(minutes=59)


def test_resend_while_a_retry_is_queued_changes_nothing():
    endpoints(1)
    message = webhooks.send("invoice.paid", {"id": 1})
    delivery = message.deliveries.get()
    later = timezone.now() + timedelta(hours=2)
    Delivery.objects.filter(pk=delivery.pk).update(attempts=3, next_attempt_at=later)
    assert webhooks.resend(delivery) is False
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.next_attempt_at, delivery.resent_at) == (3, later, None)


def test_replay_and_send_test_refuse_a_disabled_or_foreign_endpoint():
    (mine,) = endpoints(1, tenant="acme")
    (theirs,) = endpoints(1, tenant="globex")
    message = webhooks.send("invoice.paid", {"id": 1}, tenant="acme")
    with pytest.raises(ValidationError, match="its own tenant"):
        webhooks.replay(message, theirs)
    webhooks.disable(mine, "maintenance")
    with pytest.raises(ValidationError, match="disabled"):
        webhooks.replay(message, mine)
    with pytest.raises(ValidationError, match="disabled"):
        webhooks.send_test(mine)
    with pytest.raises(ValidationError, match="disabled"):
        webhooks.recover(mine, since=timezone.now() - timedelta(hours=1))
    assert Delivery.objects.filter(endpoint=theirs).count() == 0


def test_a_disabled_endpoints_reason_reads_once():
    (endpoint,) = endpoints(1)
    webhooks.disable(endpoint)
    endpoint.refresh_from_db()
    assert endpoint.disabled_reason == "by hand"
    with pytest.raises(ValidationError) as refused:
        webhooks.send_test(endpoint)
    assert refused.value.messages == [
        f"Endpoint {endpoint.pk} is disabled (by hand): enable() it first."
    ]


@pytest.mark.parametrize(
    ("lease", "says"),
    [
        (30, "below 30 (OUTBOX['LEASE_SECONDS'], so a lease outlasts its request), not 3600."),
        (7200, "below 600 (the most a request may take), not 3600."),
    ],
)
def test_a_timeout_too_long_names_the_limit_that_applies(lease, says):
    with (
        override_settings(OUTBOX={"LEASE_SECONDS": lease}),
        pytest.raises(ValidationError) as refused,
    ):
        webhooks.create_endpoint(URL, timeout=3600)
    assert refused.value.messages[0].endswith(says)


def test_a_payload_too_large_names_the_limit_in_bytes():
    with (
        override_settings(OUTBOX={"WEBHOOKS": {"MAX_PAYLOAD_BYTES": 100}}),
        pytest.raises(ValidationError) as refused,
    ):
        webhooks.send("invoice.paid", {"blob": "x" * 200})
    assert "OUTBOX['WEBHOOKS']['MAX_PAYLOAD_BYTES'] (100 bytes)." in refused.value.messages[0]


@pytest.mark.parametrize("url", ["https://[::1/x", "https://exa mple.com/", "", 42])
def test_a_malformed_url_is_a_validation_error(url):
    with pytest.raises(ValidationError):
        webhooks.create_endpoint(url)


def test_a_delivery_job_is_enqueued_as_any_job_is_with_its_signal_and_the_defaults():
    from django_outbox.compat import task_enqueued
    from django_outbox.jobs.results import to_task_result
    from django_outbox.webhooks.tasks import deliver

    endpoints(3)
    heard = []

    def receiver(sender, task_result, **kwargs):
        heard.append(task_result)

    task_enqueued.connect(receiver)
    try:
        with override_settings(OUTBOX={"BACKOFF_BASE": 2.0, "BACKOFF_CAP": 90.0}):
            message = webhooks.send("invoice.paid", {"id": 1})
    finally:
        task_enqueued.disconnect(receiver)
    jobs = Job.objects.filter(task_path=deliver.module_path).order_by("pk")
    assert len(heard) == 3 == len(jobs)
    # One signal per job, with the job's own result: its id, task and arguments.
    assert [r.id for r in heard] == [to_task_result(job).id for job in jobs]
    assert {r.task.module_path for r in heard} == {deliver.module_path}
    deliveries = set(message.deliveries.values_list("pk", flat=True))
    assert {r.args[0] for r in heard} == deliveries
    assert {(j.priority, j.backoff_base, j.backoff_cap) for j in jobs} == {(0, 2.0, 90.0)}


@pytest.mark.skipif(
    connection.vendor == "postgresql", reason="its planner picks by the table's size"
)
def test_a_resend_finds_active_delivery_jobs_through_the_index_of_active_dedup_keys():
    """SQLite uses a partial index only where the query states the index's condition in
    its terms, and MariaDB has none (a generated column holds an active job's key, with
    the unique index): a fan-out that compared ``dedup_key`` with bound statuses read the
    whole job table once for each delivery, and a transaction of many sends slowed down
    with every one. A resend or a recovery looks, since a delivery may have a job."""
    (endpoint, *_) = endpoints(3)
    webhooks.send("invoice.paid", {"n": 1})
    Job.objects.update(status=JobStatus.FAILED)
    Delivery.objects.update(status=DeliveryStatus.FAILED)
    with CaptureQueriesContext(connection) as queries:
        assert webhooks.recover(endpoint, since=timezone.now() - timedelta(hours=1)) == 1
    (insert,) = [q["sql"] for q in queries if "outbox:enqueue-select" in q["sql"]]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {insert}")
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            assert "SEARCH j USING INDEX outbox_job_dedup_active" in plan, plan
        else:
            cursor.execute(f"EXPLAIN {insert}")
            columns = [column[0] for column in cursor.description]
            steps = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            (job_lookup,) = [step for step in steps if step["table"] == "j"]
            assert job_lookup["key"] == "outbox_job_dedup_active", steps
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 1


def test_a_send_writes_its_delivery_jobs_without_reading_the_job_table():
    """A message send() writes has no deliveries before, so no delivery job can exist:
    its fan-out inserts one job a delivery and does not look for active ones."""
    endpoints(3)
    with CaptureQueriesContext(connection) as queries:
        message = webhooks.send("invoice.paid", {"n": 1})
    (insert,) = [q["sql"] for q in queries if "outbox:enqueue-select" in q["sql"]]
    assert Job._meta.db_table not in insert.split("SELECT", 1)[1], insert
    jobs = Job.objects.filter(queue="webhooks", status=JobStatus.QUEUED)
    assert sorted(job.args[0] for job in jobs) == sorted(
        message.deliveries.values_list("pk", flat=True)
    )
