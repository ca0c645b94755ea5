"""runworker against a database it cannot use: settings the server refuses stop it at once,
with what to correct; a server that does not answer is waited for (bounded under --burst),
and the worker starts working as soon as it answers."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from django_outbox.models import Job
from django_outbox.models.jobs import JobStatus
from tests import tasks
from tests.conftest import wait_until
from tests.test_migrated import manage

SERVER_URL = os.environ.get("DATABASE_URL", "")
ON_A_SERVER = pytest.mark.skipif(
    not SERVER_URL, reason="a database server's own (the PostgreSQL and MariaDB runs have it)"
)


def with_url(url: str, *, port: int | None = None, user: str | None = None, name: str = "") -> str:
    """``url`` with another port, user or database name."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{user if user is not None else parts.username or ''}@{host}:{port or parts.port}"
    return urlunsplit((parts.scheme, netloc, "/" + (name or parts.path.lstrip("/")), "", ""))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def assert_stops_at_once_saying(out, *words: str) -> None:
    assert out.returncode == 1, out.stdout + out.stderr
    for word in words:
        assert word in out.stderr, out.stderr
    assert "Waiting will not change that" in out.stderr
    assert "Traceback" not in out.stderr
    assert "trying again" not in out.stdout + out.stderr


@ON_A_SERVER
@pytest.mark.parametrize("burst", [["--burst"], []], ids=["burst", "serving"])
def test_a_database_that_does_not_exist_stops_the_worker_at_once(burst):
    name = f"outbox_never_created_{os.getpid()}"
    out = manage("runworker", *burst, url=with_url(SERVER_URL, name=name))
    assert_stops_at_once_saying(out, f"database {name} on 127.0.0.1", "refuses the settings")


@ON_A_SERVER
def test_a_user_the_server_does_not_know_stops_the_worker_at_once():
    out = manage("runworker", url=with_url(SERVER_URL, user="outbox_nobody"))
    assert_stops_at_once_saying(out, "outbox_nobody", "DATABASES['default'] (NAME, USER, PASSWORD)")


def test_a_sqlite_file_that_cannot_be_opened_stops_the_worker_at_once(tmp_path):
    if SERVER_URL:
        pytest.skip("SQLite's own: the SQLite run has it")
    missing = tmp_path / "no-such-directory" / "db.sqlite3"
    out = manage("runworker", sqlite=missing)
    assert_stops_at_once_saying(out, f"the file {missing}", "unable to open database file")


@ON_A_SERVER
def test_a_burst_worker_gives_up_on_a_server_that_never_answers_with_one_clear_line():
    started = time.monotonic()
    out = manage("runworker", "--burst", url=with_url(SERVER_URL, port=free_port()))
    assert out.returncode == 4, out.stdout + out.stderr
    assert "did not answer in 6 tries" in out.stderr
    assert "leaving (burst) without looking for jobs" in out.stderr
    assert out.stderr.count("does not answer") == 5  # a line for each wait
    assert "Traceback" not in out.stderr
    assert time.monotonic() - started < 60


class Forwarder:
    """A TCP port that forwards to the database server, opened when the test says."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self._server: socket.socket | None = None

    def open(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen()
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
def forwarder() -> Iterator[Forwarder]:
    port = int(connection.settings_dict["PORT"] or 0)
    forwarding = Forwarder(port)
    yield forwarding
    forwarding.close()


@ON_A_SERVER
def test_a_worker_started_before_its_database_answers_waits_then_works(start_worker, forwarder):
    """As when the database restarts while a supervisor starts a worker: it waits, then
    runs its checks and the jobs queued meanwhile."""
    result = tasks.noop.enqueue()
    worker = start_worker(
        "--burst", extra_env={"DATABASE_URL": with_url(SERVER_URL, port=forwarder.port)}
    )
    wait_until(lambda: "does not answer" in worker.log(), what="the worker to try once")
    assert worker.process.poll() is None, worker.log()
    forwarder.open()
    assert worker.wait() == 0, worker.log()
    assert "answers now; starting" in worker.log()
    assert Job.objects.for_result(result.id).get().status == JobStatus.SUCCEEDED
