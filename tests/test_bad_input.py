"""The bad-input catalogue: every bad input gets a clear error, and loses or changes nothing.

Each case states the error a user sees. Cases refused at the call also check that every row
already stored (a job, an endpoint, a message with its delivery) is exactly as it was.
Cases that only show at run time (in a worker, or at a receiver) check that the job or
delivery ends clearly and that the worker goes on with its other work.

The database going away between a claim and a completion is covered where a real one can
be cut: ``test_e2e.py::test_a_worker_survives_its_connections_being_terminated``
(PostgreSQL), and ``test_worker.py`` for results written after heartbeats failed.
"""

from __future__ import annotations

import math
import re
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

import django_outbox
from django_outbox import webhooks
from django_outbox.compat import InvalidTask, TaskResultDoesNotExist, default_task_backend, task
from django_outbox.exceptions import InvalidTaskArguments
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Endpoint, Job, Message
from django_outbox.models.jobs import JobStatus
from tests import tasks
from tests.conftest import wait_until
from tests.models import Execution
from tests.receiver import Answer

pytestmark = pytest.mark.django_db(transaction=True)

MODELS = (Job, Endpoint, Message, Delivery, Attempt)


def _snapshot() -> dict[str, list[dict[str, Any]]]:
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in MODELS}


@pytest.fixture
def unchanged() -> Callable[[], bool]:
    """Store a job, an endpoint and a message; the returned check is true while every row
    is exactly as it was."""
    tasks.echo.enqueue("kept", n=1)
    webhooks.create_endpoint("https://hooks.example.com/in", event_types=["invoice.*"])
    webhooks.send("invoice.paid", {"id": 1}, idempotency_key="kept")
    before = _snapshot()
    return lambda: _snapshot() == before


def _cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _inner_task() -> None:
    @task()
    def inner() -> None:
        return None


MB10 = "x" * (10 * 1024 * 1024)

# (id, the call, the exception, what its message says)
ENQUEUES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("an object", lambda: tasks.echo.enqueue(object()), InvalidTaskArguments,
     r"must be JSON-serialisable .*Unsupported type: <class 'object'>"),
    ("a set", lambda: tasks.echo.enqueue({1, 2}), InvalidTaskArguments,
     r"Unsupported type: <class 'set'>"),
    ("a datetime", lambda: tasks.echo.enqueue(when=timezone.now()), InvalidTaskArguments,
     r"Unsupported type: <class 'datetime.datetime'>"),
    ("a Decimal", lambda: tasks.echo.enqueue(Decimal("1.10")), InvalidTaskArguments,
     r"Unsupported type: <class 'decimal.Decimal'>"),
    ("NaN", lambda: tasks.echo.enqueue(math.nan), InvalidTaskArguments,
     r"Out of range float values are not JSON compliant"),
    ("a non-string key", lambda: tasks.echo.enqueue({1: "a"}), InvalidTaskArguments,
     r"use a dict key that is not a string"),
    ("a NUL character", lambda: tasks.echo.enqueue("a\x00b"), InvalidTaskArguments,
     r"must not contain the NUL character"),
    ("a lone surrogate", lambda: tasks.echo.enqueue("\ud800"), InvalidTaskArguments,
     r"valid Unicode \(no lone surrogates\)"),
    ("a list that contains itself", lambda: tasks.echo.enqueue(_cyclic()), InvalidTaskArguments,
     r"nested too deeply, or contain themselves"),
    ("100,000 levels of nesting", lambda: tasks.echo.enqueue(_deep(100_000)),
     InvalidTaskArguments, r"nested too deeply, or contain themselves"),
    ("10 MB of arguments", lambda: tasks.echo.enqueue(MB10), InvalidTaskArguments,
     r"are 10,485,770 bytes as JSON, over OUTBOX\['MAX_ARGUMENTS_BYTES'\] \(1,048,576 bytes\)"),
    ("an unknown queue", lambda: tasks.echo.using(queue_name="nope").enqueue(), InvalidTask,
     r"Queue 'nope' is not one of TASKS\['default'\]\['QUEUES'\]: default, .*webhooks\. Add it "
     r"there, or use one of those\."),
    ("priority 1000", lambda: tasks.echo.using(priority=1000).enqueue(), InvalidTask,
     r"priority must be a whole number between -100 and 100"),
    ("priority as a string", lambda: tasks.echo.using(priority="5").enqueue(), InvalidTask,
     r"priority must be a whole number between -100 and 100, not '5'"),
    ("a naive run_after", lambda: tasks.echo.using(run_after=datetime(2030, 1, 1)).enqueue(),
     InvalidTask, r"run_after must be an aware datetime"),
    ("run_after as a string", lambda: tasks.echo.using(run_after="tomorrow").enqueue(),
     InvalidTask, r"run_after must be an aware datetime, not 'tomorrow'"),
    ("a task defined in a function", _inner_task, InvalidTask,
     r"Task function must be defined at a module level"),
    ("one bad job in enqueue_many",
     lambda: django_outbox.enqueue_many(tasks.echo, [((1,), {}), ((object(),), {})]),
     InvalidTaskArguments, r"Unsupported type: <class 'object'>"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "error", "says"), [case[1:] for case in ENQUEUES], ids=[c[0] for c in ENQUEUES]
)
def test_a_bad_enqueue_is_refused_and_stores_nothing(unchanged, call, error, says):
    with pytest.raises(error, match=says):
        call()
    assert unchanged()


# Result ids result_id() would never write (the form is "<pk>" or "<pk>-<hex token>").
BAD_RESULT_IDS: list[tuple[str, Any]] = [
    ("empty", ""),
    ("letters", "abc"),
    ("a token that is not hex", "1-zz"),
    ("negative", "-1"),
    ("a hyphen and nothing", "1-"),
    ("only a hyphen", "-"),
    ("zero", "0"),
    ("a leading zero", "01"),
    ("token 0 written out", "1-0"),
    ("a token with a leading zero", "1-01"),
    ("an uppercase token", "1-A"),
    ("a space before", " 1"),
    ("a newline after", "1\n"),
    ("a plus sign", "+1"),
    ("an underscore", "1_0"),
    ("a decimal point", "1.0"),
    ("a non-ASCII digit", "\u0661"),
    ("a key over 64 bits", str(2**63)),
    ("a huge number", "9" * 30),
    ("a token over 31 bits", "1-80000000"),
    ("a token of 9 digits", "1-" + "f" * 9),
    ("10 MB", MB10),
    ("None", None),
    ("a float", 1.5),
    ("a list", ["1"]),
]


@pytest.mark.parametrize("bad", [c[1] for c in BAD_RESULT_IDS], ids=[c[0] for c in BAD_RESULT_IDS])
def test_a_malformed_result_id_names_no_job_and_changes_nothing(unchanged, bad):
    for call in (tasks.echo.get_result, default_task_backend.get_result, django_outbox.cancel):
        with pytest.raises(TaskResultDoesNotExist, match="is not a job's result id") as caught:
            call(bad)
        assert len(str(caught.value)) < 300
    assert unchanged()


def test_tuples_are_accepted_and_arrive_as_lists(run_worker):
    result = tasks.echo.enqueue((1, (2, 3)), pair=(4, 5))
    run_worker()
    assert tasks.echo.get_result(result.id).return_value == {
        "args": [[1, [2, 3]]],
        "kwargs": {"pair": [4, 5]},
    }


def test_the_argument_limit_is_a_setting(unchanged):
    with override_settings(OUTBOX={"MAX_ARGUMENTS_BYTES": 100}):
        with pytest.raises(InvalidTaskArguments, match=r"over .* \(100 bytes\)"):
            tasks.echo.enqueue("y" * 100)
        tasks.echo.enqueue("fits")
    assert Job.objects.filter(args=["fits"]).count() == 1


SECRET = "whsec_" + "A" * 32  # a well-formed secret (24 bytes of base64)

ENDPOINTS: list[tuple[str, dict[str, Any], str]] = [
    ("ftp", {"url": "ftp://example.com/in"}, r"is not a valid https or http URL"),
    ("credentials", {"url": "https://alice:s3cret@example.com/in"},
     r"must not hold credentials \(user:password@host\)"),
    ("credentials in a long URL", {"url": "https://alice:s3cret@example.com/" + "a" * 3000},
     r"must not hold credentials"),
    ("credentials in an unparsable URL", {"url": "https://alice:s3cret@[::1/in"},
     r"must not hold credentials"),
    ("credentials without //", {"url": "https:alice:s3cret@example.com/in"},
     r"must not hold credentials"),
    ("10.0.0.1", {"url": "https://10.0.0.1/in"},
     r"points at 10\.0\.0\.1, a private address; webhooks go"),
    ("0xa.1", {"url": "https://0xa.1/in"},
     r"points at 10\.0\.0\.1, a private address; webhooks go"),
    ("167772161", {"url": "https://167772161/in"},
     r"points at 10\.0\.0\.1, a private address; webhooks go"),
    ("0177.0.0.2", {"url": "https://0177.0.0.2/in"}, r"points at 127\.0\.0\.2, a loopback address"),
    ("[::1]", {"url": "https://[::1]/in"}, r"points at ::1, a loopback address"),
    ("[::ffff:10.0.0.1]", {"url": "https://[::ffff:10.0.0.1]/in"},
     r"::ffff:10\.0\.0\.1, a private address"),
    ("cloud metadata", {"url": "https://169.254.169.254/latest"},
     r"169\.254\.169\.254, a link-local address \(cloud metadata"),
    ("2,049 characters", {"url": "https://example.com/" + "a" * 2029},
     r"at most 2,048 characters; this one has 2,049"),
    ("an event type with a space", {"event_types": ["invoice paid"]},
     r"'invoice paid' is not an event type filter"),
    ("an empty event type", {"event_types": [""]}, r"'' is not an event type filter"),
    ("event types as a string", {"event_types": "invoice.*"},
     r"event_types must be a list of event types, not the string"),
    ("a secret without its prefix", {"secret": "abc"},
     r'A webhook secret must be "whsec_" followed by base64 of 24 to 64 bytes'),
    ("a secret of 16 bytes", {"secret": "whsec_" + "A" * 22 + "=="}, r"it holds 16 bytes"),
    ("a secret that is not base64", {"secret": "whsec_!!!!"}, r"its base64 does not decode"),
]  # fmt: skip


# The tests' settings allow http:// and 127.0.0.1/32 (their receivers); 127.0.0.2 is not.


def test_http_is_refused_unless_allowed(unchanged):
    refused = pytest.raises(ValidationError, match=r"uses http://; webhooks need https://")
    with override_settings(OUTBOX={"WEBHOOKS": {"ALLOW_HTTP": False}}), refused:
        webhooks.create_endpoint("http://example.com/in")
    assert unchanged()


@pytest.mark.parametrize(
    ("options", "says"), [case[1:] for case in ENDPOINTS], ids=[c[0] for c in ENDPOINTS]
)
def test_a_bad_endpoint_is_refused_and_stores_nothing(unchanged, options, says):
    options = {"url": "https://hooks.example.com/other"} | options
    url = options.pop("url")
    with pytest.raises(ValidationError, match=says) as caught:
        webhooks.create_endpoint(url, **options)
    assert "s3cret" not in str(caught.value)  # a password in a URL is never echoed
    assert unchanged()


SENDS: list[tuple[str, Callable[[], Any], str]] = [
    ("an event type with a space", lambda: webhooks.send("invoice paid", {}),
     r"'invoice paid' is not an event type"),
    ("an empty event type", lambda: webhooks.send("", {}), r"'' is not an event type"),
    ("a payload JSON cannot hold", lambda: webhooks.send("invoice.paid", {"at": object()}),
     r"cannot be sent as JSON: Object of type object is not JSON serializable"),
    ("a 10 MB payload", lambda: webhooks.send("invoice.paid", {"blob": MB10}),
     r"is 10,485,\d{3} bytes as sent, over OUTBOX\['WEBHOOKS'\]\['MAX_PAYLOAD_BYTES'\]"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "says"), [c[1:] for c in SENDS], ids=[c[0] for c in SENDS])
def test_a_bad_send_is_refused_and_stores_nothing(unchanged, call, says):
    with pytest.raises(ValidationError, match=says):
        call()
    assert unchanged()


@pytest.mark.parametrize("grace", ["x", 10, timedelta(seconds=-1), timedelta(days=400)])
def test_a_bad_rotation_grace_is_refused_and_keeps_the_secret(unchanged, grace):
    endpoint = Endpoint.objects.get()
    with pytest.raises(ValidationError, match=r"grace must be a timedelta from 0 to 366 days"):
        webhooks.rotate_secret(endpoint, grace=grace)
    assert unchanged()


SETTINGS: list[tuple[str, dict[str, Any], str, str]] = [
    ("LEASE_SECONDS as text", {"LEASE_SECONDS": "x"}, "django_outbox.E001",
     "OUTBOX['LEASE_SECONDS'] must be a number, not 'x'."),
    ("MAX_ARGUMENTS_BYTES of 0", {"MAX_ARGUMENTS_BYTES": 0}, "django_outbox.E001",
     "OUTBOX['MAX_ARGUMENTS_BYTES'] must be a whole number greater than 0 and at most "
     "67,108,864, not 0."),
    ("a webhook timeout as text", {"WEBHOOKS": {"TIMEOUT": "x"}}, "django_outbox.E005",
     "OUTBOX['WEBHOOKS']['TIMEOUT'] must be a number greater than 0 and at most 600, not 'x'."),
    ("MAX_PAYLOAD_BYTES as text", {"WEBHOOKS": {"MAX_PAYLOAD_BYTES": "1 MB"}},
     "django_outbox.E005", "OUTBOX['WEBHOOKS']['MAX_PAYLOAD_BYTES'] must be a whole number"),
    ("WAKE unknown", {"WAKE": "carrier-pigeon"}, "django_outbox.E001",
     "OUTBOX['WAKE'] must be one of auto, postgres, redis, poll, not 'carrier-pigeon'."),
    ("a schedule that is not a dict", {"SCHEDULES": {"nightly": "0 3 * * *"}},
     "django_outbox.E004", "OUTBOX['SCHEDULES']['nightly'] must be a dict"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("outbox", "check_id", "says"), [c[1:] for c in SETTINGS], ids=[c[0] for c in SETTINGS]
)
def test_a_wrong_setting_is_a_system_check_error_with_a_stable_id(
    unchanged, outbox, check_id, says
):
    from django.core import checks

    with override_settings(OUTBOX=outbox):
        errors = [
            e
            for e in checks.run_checks(databases=["default"])
            if e.id.startswith("django_outbox.E")
        ]
    assert [e.id for e in errors] == [check_id], errors
    assert says in errors[0].msg
    assert unchanged()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--queue", "nope"], r"Unknown queue\(s\) 'nope'"),
        (["--concurrency", "0"], r"--concurrency: must be at least 1, got 0"),
        (["--processes", "-1"], r"--processes: must be at least 1, got -1"),
    ],
    ids=["an unknown queue", "--concurrency 0", "--processes -1"],
)
def test_runworker_refuses_bad_arguments_and_runs_nothing(unchanged, argv, says):
    with pytest.raises(CommandError, match=says):
        call_command("runworker", "--burst", *argv)
    assert unchanged()


# Run time: the job ends clearly, and the worker goes on with the rest.


def _run_beside_a_good_job(run_worker, bad_pk: int) -> Job:
    good = tasks.add.enqueue(2, 3)
    run_worker()
    assert tasks.add.get_result(good.id).return_value == 5  # the worker went on
    return Job.objects.get(pk=bad_pk)


def _last_error(job: Job) -> dict[str, Any]:
    return job.errors[-1]


def test_a_task_path_that_no_longer_imports_fails_with_task_not_found(run_worker, job_factory):
    job = job_factory(task_path="tests.tasks.renamed_long_ago", max_attempts=1)
    job = _run_beside_a_good_job(run_worker, job.pk)
    assert job.status == JobStatus.FAILED
    error = _last_error(job)
    assert error["exception_class_path"].endswith("TaskNotFound")
    assert "'tests.tasks.renamed_long_ago' could not be imported" in error["traceback"]


@pytest.mark.parametrize(
    ("bad", "class_path", "says"),
    [
        (tasks.raises_system_exit, "builtins.SystemExit", "SystemExit: 3"),
        (tasks.raises_keyboard_interrupt, "builtins.KeyboardInterrupt", "KeyboardInterrupt"),
        (tasks.raises_unprintable, "tests.tasks.UnprintableError", "<exception str() failed>"),
    ],
    ids=["SystemExit", "KeyboardInterrupt", "an exception whose __str__ raises"],
)
def test_a_task_that_raises_anything_fails_its_job_not_the_worker(
    run_worker, bad, class_path, says
):
    job = _run_beside_a_good_job(run_worker, parse_result_id(bad.enqueue().id).pk)
    assert job.status == JobStatus.FAILED
    assert _last_error(job)["exception_class_path"] == class_path
    assert says in _last_error(job)["traceback"]


def test_a_return_value_json_cannot_hold_fails_the_job_once_without_a_retry(run_worker):
    job = _run_beside_a_good_job(
        run_worker, parse_result_id(tasks.returns_datetime.enqueue().id).pk
    )
    assert job.status == JobStatus.FAILED
    assert job.attempts == 1 and job.max_attempts == 3  # not run again for the same value
    assert "returned a value JSON cannot hold" in _last_error(job)["traceback"]
    assert Execution.objects.filter(key="returns_datetime").count() == 1


# Receivers that misbehave: the attempt says what happened, and nothing else is reached.


def _settled(message: Message) -> Delivery:
    def done() -> Delivery | None:
        delivery = Delivery.objects.get(message=message)
        active = Job.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
        return None if delivery.status == DeliveryStatus.PENDING or active.exists() else delivery

    return wait_until(done, timeout=20, what="the delivery to settle")


def _attempts(delivery: Delivery) -> list[Attempt]:
    return list(Attempt.objects.filter(delivery=delivery).order_by("number"))


def test_a_redirect_to_a_private_address_is_not_followed(receiver, webhook_worker):
    receiver.script("/steal", Answer(302, headers={"location": "http://10.0.0.1/admin"}))
    webhooks.create_endpoint(receiver.url("/steal"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    delivery = _settled(message)
    assert delivery.status == DeliveryStatus.FAILED  # every attempt got only the 302
    attempts = _attempts(delivery)
    assert {a.status_code for a in attempts} == {302}
    assert attempts[0].response_headers.get("location") == "http://10.0.0.1/admin"


def test_a_body_that_is_not_utf8_is_stored_safely(receiver, webhook_worker):
    receiver.script("/bytes", Answer(200, body=b"ok \xff\xfe\x00 done"))
    webhooks.create_endpoint(receiver.url("/bytes"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    delivery = _settled(message)
    assert delivery.status == DeliveryStatus.SUCCEEDED
    (attempt,) = _attempts(delivery)
    assert attempt.response_body.startswith("ok \ufffd\ufffd") and "done" in attempt.response_body


class RawReceiver:
    """A receiver that speaks raw bytes: it reads a request, then sends ``head`` and then
    either ``body`` for ever (``endless``) or ``body`` and closes mid-response."""

    def __init__(self, head: bytes, body: bytes, endless: bool) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.head, self.body, self.endless = head, body, endless
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/raw"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(self.head)
                    conn.sendall(self.body)
                    while self.endless:
                        conn.sendall(self.body)
                except OSError:
                    pass  # the client hung up: what an endless body ends with

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_receiver() -> Iterator[Callable[..., RawReceiver]]:
    made: list[RawReceiver] = []

    def make(head: bytes, body: bytes, endless: bool = False) -> RawReceiver:
        made.append(RawReceiver(head, body, endless))
        return made[-1]

    yield make
    for server in made:
        server.close()


def test_an_endless_body_is_read_to_4_kib_and_the_delivery_succeeds(raw_receiver, webhook_worker):
    server = raw_receiver(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"400\r\n" + b"z" * 1024 + b"\r\n",
        endless=True,
    )
    webhooks.create_endpoint(server.url)
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    delivery = _settled(message)
    assert delivery.status == DeliveryStatus.SUCCEEDED
    (attempt,) = _attempts(delivery)
    assert attempt.response_body == "z" * 4096


def test_a_connection_closed_before_the_status_line_is_retried_then_failed(
    raw_receiver, webhook_worker
):
    server = raw_receiver(b"HTTP/1.1 2", b"")
    webhooks.create_endpoint(server.url)
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    delivery = _settled(message)
    assert delivery.status == DeliveryStatus.FAILED
    attempts = _attempts(delivery)
    assert len(attempts) == 4  # the test schedule's four steps
    # A close the client sees mid-read, or as a reset, depending on timing.
    assert {a.error_class for a in attempts} <= {"RemoteProtocolError", "ReadError"}
    assert all(a.status_code is None for a in attempts)


def test_messages_never_echo_what_they_refuse_to_hold():
    # The refusals above quote the offending value only where it is safe: never a URL's
    # password, never a whole 10 MB argument.
    with pytest.raises(InvalidTaskArguments) as caught:
        tasks.echo.enqueue(MB10)
    assert len(str(caught.value)) < 300
    with pytest.raises(ValidationError) as refused:
        webhooks.create_endpoint("https://example.com/" + "a" * 5000)
    assert len(str(refused.value)) < 300
    assert re.search(r"'https://example.com/a+'…", str(refused.value))
