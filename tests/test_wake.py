"""Wake-ups, against the real services: PostgreSQL LISTEN/NOTIFY, Redis, and polling.

Workers here poll only every 30 s, so a pickup within a second can only be a wake-up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

import django
import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

import django_outbox
from django_outbox.db import dialect
from django_outbox.jobs import leases
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Job
from django_outbox.models import Worker as WorkerRow
from django_outbox.wake import notify, postgres
from django_outbox.wake.base import Sender
from django_outbox.wake.notify import Coalescer
from django_outbox.wake.postgres import PostgresWaker, channel_for, listener_params, read_payload
from django_outbox.wake.redis import SENDER_PAUSE_SECONDS, key_for
from django_outbox.worker import Worker, pauses
from django_outbox.worker.process import start_in_thread
from tests import tasks
from tests.conftest import ROOT, stop_pool, wait_until
from tests.models import Execution

#: Wake-ups are the worker's own, the same under both Django versions: CI runs this
#: module in the Django 6.1 row only (it must stay under 25 minutes).
pytestmark = pytest.mark.skipif(django.VERSION < (6, 0), reason="run in the Django 6.1 row only")

MODES = ["poll", "postgres", "redis"]
REQUIRED = os.environ.get("OUTBOX_REQUIRE_SERVICES") == "1"


def redis_client(url: str | None = None):
    import redis

    # The tests' own database number (tests/settings.py).
    url = url or os.environ.get("OUTBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    return redis.Redis.from_url(url, socket_connect_timeout=1)


def require(mode: str) -> None:
    if mode == "postgres" and connection.vendor != "postgresql":
        pytest.skip("PostgreSQL wake-ups need the PostgreSQL run")
    if mode == "redis":
        try:
            redis_client().ping()
        except Exception as exc:
            if REQUIRED:
                pytest.fail(f"Redis is required here but not reachable: {exc}")
            pytest.skip(f"no Redis at 127.0.0.1:6379 ({exc})")
        redis_client().flushdb()


def worker_env(mode: str) -> dict[str, str]:
    return {
        "OUTBOX_TEST_WAKE": mode,
        "OUTBOX_TEST_POLL_INTERVAL": "0.05" if mode == "poll" else "30",
        "OUTBOX_TEST_STALLED_CHECK_SECONDS": "30",
    }


def started(worker, mode: str) -> None:
    ready = {
        "poll": "wake-ups: poll",
        "postgres": "wake-ups: postgres",
        "redis": "wake-ups: redis",
    }[mode]
    wait_until(lambda: ready in worker.log(), timeout=20, what=f"a worker using {mode}")


def terminate_listeners() -> int:
    """Kill every worker's LISTEN connection, as a server restart or a DBA would."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'django_outbox listener'"
            " AND datname = current_database()"  # not another test run's workers
        )
        return int(cursor.fetchone()[0])


def assert_prompt_pickup(key: str, worker) -> None:
    """A job committed now starts within 1.5 s: far sooner than the 30 s poll."""
    with transaction.atomic():
        result = tasks.record_run.enqueue(key)
    committed = timezone.now()
    assert first_start(result) - committed < timedelta(seconds=1.5), worker.log()


def first_start(result) -> float:
    run = wait_until(
        lambda: Execution.objects.filter(job_id=parse_result_id(result.id).pk).first(),
        what="the job to run",
    )
    return run.started


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", MODES)
def test_a_committed_job_is_picked_up_at_once(start_worker, mode):
    require(mode)
    worker = start_worker("--queues", "slow", extra_env=worker_env(mode))
    started(worker, mode)
    time.sleep(0.3)  # let it settle into its idle wait
    assert_prompt_pickup("wake", worker)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["postgres", "redis"])
def test_a_delayed_job_is_woken_at_its_due_time_not_before(start_worker, mode):
    require(mode)
    worker = start_worker("--queues", "slow", extra_env=worker_env(mode))
    started(worker, mode)
    time.sleep(0.3)
    result = tasks.record_run.using(run_after=timedelta(seconds=1.5)).enqueue("delayed")
    run_at = Job.objects.for_result(result.id).get().run_at
    begun = first_start(result)
    assert run_at <= begun < run_at + timedelta(seconds=1), worker.log()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.fixture
def recording():
    """The default database's signals, recorded instead of sent."""
    recording = Recording()
    notify.reset()  # the sender in use stops, with its connection, before it is replaced
    notify._coalescers["default"] = Coalescer(recording)
    try:
        yield recording
    finally:
        notify.reset()


@pytest.mark.django_db(transaction=True)
def test_signals_go_only_on_commit_and_once_per_queue_for_a_bulk_enqueue(recording):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.enqueue()
        raise RuntimeError("rolled back")
    assert recording.sent == []
    with transaction.atomic():
        django_outbox.enqueue_many(tasks.noop, [((), {})] * 300)
        django_outbox.enqueue_many(tasks.email, [(("a@b.c",), {})] * 300)
        assert recording.sent == []  # not before the commit
    # One signal for the transaction, for both of its queues.
    assert [sorted(queues) for _at, queues in recording.sent] == [["default", "emails"]]


@pytest.mark.django_db(transaction=True)
def test_a_transaction_signals_each_queue_once_and_a_rolled_back_savepoint_drops_no_other(
    recording,
):
    def signalled() -> list[list[str]]:
        sent = [sorted(queues) for _at, queues in recording.sent]
        recording.sent.clear()
        return sent

    soon = timezone.now() + timedelta(minutes=1)
    with transaction.atomic():  # a view's loop of enqueues
        tasks.noop.using(run_after=soon).enqueue()
        for _ in range(100):
            tasks.noop.enqueue()
            tasks.email.enqueue("a@b.c")
    ((_at, queues),) = recording.sent
    assert sorted(queues) == ["default", "emails"]
    assert queues["default"] < soon.timestamp() - 30  # the earliest job's due time
    recording.sent.clear()

    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.noop.enqueue()
            raise RuntimeError("this savepoint rolls back")
        tasks.email.enqueue("a@b.c")
    assert signalled() == [["emails"]]

    with transaction.atomic():
        with transaction.atomic():  # released: its job commits with the transaction
            tasks.noop.enqueue()
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.email.enqueue("a@b.c")
            raise RuntimeError("this one rolls back")
        tasks.noop.enqueue()
    (sent,) = signalled()
    assert "default" in sent  # (a signal for the rolled-back email costs an empty claim)

    with pytest.raises(RuntimeError), transaction.atomic():
        for _ in range(10):
            tasks.noop.enqueue()
        raise RuntimeError("all of it rolls back")
    assert signalled() == []
    assert Job.objects.filter(queue="default").count() == 1 + 100 + 2


def heard_by_a_listener(enqueue) -> list[str]:
    """The queues a PostgreSQL listener of "default" and "emails" hears of, one entry per
    notification, while ``enqueue()`` runs and for half a second after."""
    require("postgres")
    with psycopg.connect(**listener_params("default")) as listener:
        for queue in ("default", "emails"):
            listener.execute(f'LISTEN "{channel_for(queue)}"')
        enqueue()
        notes = list(listener.notifies(timeout=0.5))
    return sorted(read_payload(n.payload, {"default", "emails"})[0] for n in notes)


@pytest.mark.django_db(transaction=True)
def test_postgres_hears_one_notification_per_queue_for_a_transactions_many_enqueues():
    def many() -> None:
        with transaction.atomic():
            for _ in range(50):
                tasks.noop.enqueue()
                tasks.email.enqueue("x@y.z")

    assert heard_by_a_listener(many) == ["default", "emails"]


@pytest.mark.django_db(transaction=True)
def test_postgres_delivers_the_signals_to_a_listener():
    def two_commits() -> None:
        django_outbox.enqueue_many(tasks.noop, [((), {})] * 3)
        tasks.email.enqueue("x@y.z")

    assert heard_by_a_listener(two_commits) == ["default", "emails"]


@pytest.mark.django_db(transaction=True)
def test_redis_markers_only_on_commit():
    require("redis")
    key = key_for("redis", "default", "default")
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.enqueue()
        raise RuntimeError("rolled back")
    assert redis_client().zcard(key) == 0
    tasks.noop.enqueue()
    assert redis_client().zcard(key) == 1
    later = key_for("redis", "default", "default", delayed=True)
    due = timezone.now() + timedelta(minutes=5)
    tasks.noop.using(run_after=due).enqueue()
    tasks.noop.using(run_after=due + timedelta(minutes=5)).enqueue()
    assert redis_client().zscore(later, "next") == pytest.approx(due.timestamp(), abs=0.01)


class Recording(Sender):
    name = "recording"

    def __init__(self):
        self.sent = []

    def send(self, queues):
        self.sent.append((time.monotonic(), dict(queues)))


class Slow(Recording):
    """A sender whose first send takes a while, as a slow network would."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()

    def send(self, queues):
        if not self.entered.is_set():
            self.entered.set()
            time.sleep(0.3)
        super().send(queues)


def test_every_signal_goes_at_once_and_is_never_held_for_later():
    sender = Recording()
    coalescer = Coalescer(sender)
    for due in (1.0, 2.0, 3.0):
        coalescer.request({"a": due})
    # One after another, nothing is held back: an idle worker hears of each job at once.
    assert [queues for _at, queues in sender.sent] == [{"a": 1.0}, {"a": 2.0}, {"a": 3.0}]


def test_signals_asked_for_during_a_send_go_once_right_after_it():
    sender = Slow()
    coalescer = Coalescer(sender)
    first = threading.Thread(target=coalescer.request, args=({"a": 1.0},))
    first.start()
    sender.entered.wait(5)
    for due in (5.0, 0.5, 4.0):
        coalescer.request({"a": due})  # "a" is being sent: left to that thread, no wait
    coalescer.request({"b": 3.0})  # nobody is sending "b": at once
    assert [queues for _at, queues in sender.sent] == [{"b": 3.0}]
    first.join(5)
    # The sending thread sent once more, for the three requests, with the earliest due.
    assert [queues for _at, queues in sender.sent] == [{"b": 3.0}, {"a": 1.0}, {"a": 0.5}]
    coalescer.request({"a": 9.0})  # and nothing is left over: the next goes at once
    assert sender.sent[-1][1] == {"a": 9.0}


@pytest.mark.django_db(transaction=True)
def test_the_last_jobs_signal_goes_out_before_the_enqueuing_process_exits():
    """A short-lived process (a script, a management command) that enqueues and exits at
    once still signals its last job: nothing is left for a thread that dies with it."""
    require("postgres")
    script = (
        "import django; django.setup()\n"
        "from tests import tasks\n"
        "for n in range(5): tasks.noop.enqueue()\n"
    )
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "OUTBOX_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    with psycopg.connect(**listener_params("default")) as listener:
        listener.execute(f'LISTEN "{channel_for("default")}"')
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        notes = list(listener.notifies(timeout=1.0))
    last = Job.objects.order_by("-pk").first()
    assert last is not None and Job.objects.count() == 5
    signalled = [read_payload(n.payload, {"default"})[1] for n in notes]
    assert max(signalled) >= round(last.run_at.timestamp(), 3), (signalled, last.run_at)


@pytest.mark.django_db(transaction=True)
def test_a_killed_listen_connection_is_replaced_and_the_worker_looks_at_once(start_worker):
    require("postgres")
    worker = start_worker("--queues", "slow", extra_env=worker_env("postgres"))
    started(worker, "postgres")
    assert terminate_listeners() == 1
    wait_until(lambda: "listening again on PostgreSQL" in worker.log(), what="a new listener")
    assert_prompt_pickup("after-reconnect", worker)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.django_db(transaction=True)
def test_a_probe_that_never_comes_back_falls_back_to_polling(caplog):
    require("postgres")

    class SilentLikePgBouncer(PostgresWaker):
        def _probe_channels(self):
            listen, _ = super()._probe_channels()
            return listen, listen + ".nobody"

    import threading

    waker = SilentLikePgBouncer(["default"], threading.Event())
    began = time.monotonic()
    waker.start()
    assert not waker.active
    assert 1.9 < time.monotonic() - began < 5
    assert "did not come back within 2 s" in caplog.text
    waker.close()


@pytest.fixture
def own_redis(tmp_path):
    """A Redis server of the test's own, on another port, to stop and start at will."""
    binary = shutil.which("redis-server")
    if binary is None:
        if REQUIRED:
            pytest.fail("redis-server is required here")
        pytest.skip("no redis-server binary")
    with socket.create_server(("127.0.0.1", 0)) as spare:  # a free port, for two runs at once
        port = spare.getsockname()[1]
    command = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]

    class Server:
        url = f"redis://127.0.0.1:{port}/0"
        address = port

        def start(self):
            self.process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL)
            wait_until(lambda: _pings(self.url), timeout=10, what="our Redis to start")

        def stop(self):
            self.process.terminate()
            self.process.wait(10)

    server = Server()
    server.start()
    yield server
    server.stop()


def _pings(url):
    try:
        return redis_client(url).ping()
    except Exception:
        return False


def redis_caches(url):
    return {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "redis": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "outbox-tests",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 5},
        },
    }


@pytest.mark.django_db(transaction=True)
def test_enqueue_succeeds_with_redis_stopped_and_a_worker_wakes_after_it_restarts(
    start_worker, own_redis
):
    env = worker_env("redis") | {"OUTBOX_TEST_REDIS_URL": own_redis.url}
    with override_settings(CACHES=redis_caches(own_redis.url)):
        worker = start_worker("--queues", "slow", extra_env=env)
        started(worker, "redis")
        own_redis.stop()
        stopped = tasks.record_run.enqueue("while-redis-is-down")  # no error: a hint is lost
        failed_send = time.monotonic()
        assert Job.objects.for_result(stopped.id).exists()  # stored; it runs when found
        wait_until(lambda: "Redis" in worker.log() and "polling" in worker.log(), what="fallback")
        own_redis.start()
        wait_until(lambda: "answers again" in worker.log(), timeout=20, what="Redis back")
        first_start(stopped)  # found at once after the reconnect
        # A process whose send failed skips Redis for SENDER_PAUSE_SECONDS (its commits do
        # not each wait on a Redis that is down); a commit after that wakes the worker.
        time.sleep(max(0.0, failed_send + SENDER_PAUSE_SECONDS - time.monotonic()))
        assert_prompt_pickup("after-restart", worker)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_long_queue_names_get_distinct_hashed_channels_within_postgres_limit():
    long_a, long_b = "q" * 80 + "a", "q" * 80 + "b"
    assert channel_for("emails") == "outbox.emails"
    for name in (long_a, long_b, "ü" * 40):
        assert len(channel_for(name).encode()) <= 63
    assert channel_for(long_a) != channel_for(long_b)


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "not json",
        "[]",
        '{"q": 1}',
        '{"q": "other", "at": 1}',
        '{"q": "slow"}',
        '{"q": "slow", "at": 1e999}',
        '{"q": "slow", "at": 1' + "0" * 400 + "}",
    ],
)
def test_payloads_we_did_not_send_are_ignored(payload):
    assert read_payload(payload, {"slow"}) is None
    assert read_payload('{"q": "slow", "at": 12.5}', {"slow"}) == ("slow", 12.5)


@pytest.mark.django_db(transaction=True)
def test_a_worker_survives_garbage_on_its_channel(start_worker):
    require("postgres")
    worker = start_worker("--queues", "slow", extra_env=worker_env("postgres"))
    started(worker, "postgres")
    with connection.cursor() as cursor:
        for garbage in [
            "",
            "{",
            '{"q": null}',
            "\x01\x02",
            '{"q": "slow", "at": 1e999}',
            '{"q": "slow", "at": 1' + "0" * 400 + "}",
        ]:
            cursor.execute("SELECT pg_notify(%s, %s)", [channel_for("slow"), garbage])
    assert_prompt_pickup("after-garbage", worker)
    assert worker.process.poll() is None
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["postgres", "redis"])
def test_a_busy_worker_with_room_sees_a_signal_without_waiting_for_its_poll(start_worker, mode):
    require(mode)
    worker = start_worker("--queues", "slow", "--concurrency", "2", extra_env=worker_env(mode))
    started(worker, mode)
    long = tasks.record_run.enqueue("long", seconds=5)
    first_start(long)  # busy now, with one thread to spare
    time.sleep(0.5)
    assert_prompt_pickup("while-busy", worker)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_enqueue_and_worker_start_need_no_psycopg_on_sqlite(tmp_path):
    code = """
import sys
sys.modules["psycopg"] = None  # as if the postgres extra were not installed
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from testproject.shop.tasks import send_welcome
from django_outbox.worker import Worker
from django_outbox.worker.process import start_in_thread
send_welcome.enqueue(1)
Worker(queues=["emails"], burst=True).run()
print("ok")
"""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "OUTBOX_SQLITE_PATH": str(tmp_path / "no-psycopg.sqlite3"),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.strip().endswith("ok"), out.stderr


@pytest.mark.django_db(transaction=True)
def test_a_due_job_locked_by_someone_else_does_not_make_an_idle_worker_spin(start_worker):
    require("postgres")
    # The safety net (a look every stalled check while wake-ups are on) every 4 s, not 30,
    # finds the job once the lock is gone.
    env = worker_env("postgres") | {"OUTBOX_TEST_STALLED_CHECK_SECONDS": "4"}
    worker = start_worker("--queues", "slow", extra_env=env)
    started(worker, "postgres")
    result = tasks.record_run.using(run_after=timedelta(seconds=1)).enqueue("locked")
    with transaction.atomic():
        Job.objects.select_for_update().for_result(result.id).get()  # as a claim in flight would
        time.sleep(3)  # due after 1 s, but locked until 3 s
    first_start(result)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    statements = int(worker.log().split(" statements (")[0].rsplit(" ", 1)[1])
    assert statements < 40, worker.log()


@pytest.mark.django_db(transaction=True)
def test_a_signal_lost_while_the_listener_is_down_costs_no_30_s_wait(start_worker):
    require("postgres")
    worker = start_worker("--queues", "slow", extra_env=worker_env("postgres"))
    started(worker, "postgres")
    assert terminate_listeners() == 1
    result = tasks.record_run.enqueue("signal-lost")  # its NOTIFY finds no listener
    committed = timezone.now()
    # The worker looks for work at once after the failure and again after reconnecting.
    assert first_start(result) - committed < timedelta(seconds=3), worker.log()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


class InProcessWorker:
    """A worker on a thread of the test process, so its statement counts can be read."""

    def __init__(self, mode: str, **outbox):
        self.settings = override_settings(
            OUTBOX=settings.OUTBOX | {"WAKE": mode, "STALLED_CHECK_SECONDS": 30.0} | outbox
        )

    def __enter__(self) -> Worker:
        self.settings.enable()
        self.worker = Worker(queues=["slow"], concurrency=1)
        self.thread = start_in_thread(self.worker)
        assert self.worker.ready.wait(15), "the worker did not start"
        time.sleep(0.5)  # let it settle into its idle wait
        return self.worker

    def __exit__(self, *exc) -> None:
        self.worker.request_stop("test done")
        self.thread.join(15)
        stop_pool(self.worker.pool)
        self.settings.disable()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["postgres", "redis"])
def test_a_rolled_back_enqueue_wakes_no_worker_and_a_commit_does(mode):
    require(mode)
    with InProcessWorker(mode) as worker:
        claims_before, statements_before = worker.stats.claimed, worker.stats.statements
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.record_run.enqueue("rolled-back")
            raise RuntimeError("rolled back")
        time.sleep(1.0)
        # Not woken: not one statement since (its own next look is 30 s away).
        assert worker.stats.statements == statements_before
        assert_prompt_pickup("committed", worker)
        assert worker.stats.claimed == claims_before + 1
    assert not Execution.objects.filter(key="rolled-back").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["postgres", "redis"])
def test_an_idle_worker_sends_only_its_claim_and_rescue_per_stalled_check(mode, monkeypatch):
    require(mode)
    monkeypatch.setattr(postgres, "HEARTBEAT_SECONDS", 0.5)
    check = 0.5
    with InProcessWorker(mode, STALLED_CHECK_SECONDS=check, HEARTBEAT_SECONDS=0.4) as worker:
        before, began = worker.stats.statements, time.monotonic()
        time.sleep(3.0)
        seconds = time.monotonic() - began
        sent, checks = worker.stats.statements - before, seconds / check
        heartbeat_at = WorkerRow.objects.get(id=worker.id).heartbeat_at
    # Per stalled check: one claim, one rescue; no next-due query after an empty look.
    # With postgres wake-ups, the listener's heartbeat is also the worker's "alive"; with
    # redis, the main connection says it, at most once per check. Where UPDATE returns
    # nothing (MariaDB) the claim is BEGIN, its locking SELECT and COMMIT.
    claim = 1 if dialect("default").update_returning else 3
    per_check = claim + 1 + (0 if mode == "postgres" else 1)
    # Besides: which queues are paused, read at most once a second before a claim, and
    # the sweep of keys with a free turn, at most once in the window (maintenance.py).
    besides = seconds / pauses.REFRESH_SECONDS + 1 + 1
    # It does look every check; one late look is allowed on a loaded machine (CI runs two
    # test rows at once), and spinning would send hundreds.
    assert 2 * (checks - 2) <= sent <= per_check * (checks + 1) + besides, (sent, checks)
    assert timezone.now() - heartbeat_at < timedelta(seconds=1.5)


@pytest.mark.django_db(transaction=True)
def test_a_redis_that_refuses_the_wake_up_commands_costs_latency_never_a_job(
    start_worker, own_redis
):
    """An ACL that forbids BZPOPMIN and ZADD: enqueue succeeds, the worker polls."""
    client = redis_client(own_redis.url)
    client.execute_command("ACL", "SETUSER", "limited", "on", "nopass", "~*", "&*", "+@all")
    client.execute_command("ACL", "SETUSER", "limited", "-bzpopmin", "-zadd")
    url = f"redis://limited:any@127.0.0.1:{own_redis.address}/0"
    env = worker_env("redis") | {
        "OUTBOX_TEST_REDIS_URL": url,
        "OUTBOX_TEST_POLL_INTERVAL": "0.2",
    }
    with override_settings(CACHES=redis_caches(url)):
        worker = start_worker("--queues", "slow", extra_env=env)
        wait_until(lambda: "refused a command" in worker.log(), what="the fallback")
        result = tasks.record_run.enqueue("acl")  # ZADD refused: no error
        first_start(result)  # found by polling
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    assert worker.log().count("refused a command") == 1, worker.log()


def test_the_listener_heartbeat_is_the_workers_alive_update(transactional_db, monkeypatch):
    require("postgres")
    monkeypatch.setattr(postgres, "HEARTBEAT_SECONDS", 0.2)
    row = WorkerRow.objects.create(
        id="w-listener",
        hostname="h",
        pid=1,
        concurrency=1,
        heartbeat_at=timezone.now() - timedelta(hours=1),
    )
    waker = PostgresWaker(["slow"], threading.Event(), alive=lambda: leases.alive_statement(row.id))
    waker.start()
    try:
        assert waker.reports_alive
        waker.wait(0.5)
    finally:
        waker.close()
    row.refresh_from_db()
    assert timezone.now() - row.heartbeat_at < timedelta(seconds=1)
    assert not PostgresWaker(["slow"], threading.Event()).reports_alive  # never started


@pytest.mark.django_db
def test_a_redis_alias_that_names_no_cache_leaves_the_worker_polling(caplog):
    """Where system checks did not run (E003 says it first), the worker still starts."""
    import threading

    from django.test import override_settings

    from django_outbox.wake import build_waker
    from django_outbox.wake.polling import PollingWaker

    with override_settings(OUTBOX={"WAKE": "redis", "REDIS_ALIAS": "nowhere"}):
        waker = build_waker(["default"], threading.Event(), using="default")
    try:
        assert isinstance(waker, PollingWaker)
        assert "wake-ups: a wake-up channel failed to start" in caplog.text
        assert "no wake-up channel works (WAKE='redis'): polling" in caplog.text
    finally:
        waker.close()
