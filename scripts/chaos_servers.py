"""The servers the chaos run breaks and mends: its database server and Redis.

A database server is one class here, picked by DATABASE_URL's scheme: how to cut every
connection to the run's database but the driver's own, how to restart the server, and how
to leave it running at the end whatever happened. The driver (``chaos.py``) only names the
fault; what it takes on each server lives here.
"""

from __future__ import annotations

import os
import subprocess
import time
from urllib.parse import SplitResult, unquote

REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379",
               "--save", ""]  # fmt: skip


class Database:
    """A database server the run may cut off and restart."""

    #: Its name in messages.
    name = "database"

    def __init__(self, url: SplitResult) -> None:
        self.url = url

    def prepare(self) -> None:
        """Anything the run needs before Django connects (nothing, unless said)."""

    def cut_connections(self) -> None:
        """End every connection to the run's database but this process's own."""
        raise NotImplementedError

    def restart(self) -> None:
        """Stop the server and start it again; return once it answers."""
        raise NotImplementedError

    def ensure_running(self) -> None:
        """Leave the server running, whatever the run did to it."""
        raise NotImplementedError


class PostgreSQL(Database):
    """The local cluster that serves DATABASE_URL's port, restarted by ``pg_ctlcluster``."""

    name = "PostgreSQL"

    def cut_connections(self) -> None:
        from django.db import DatabaseError, connection

        for _ in range(2):  # this process's own connection may be the one a fault cut
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                return
            except DatabaseError:
                connection.close()

    def restart(self) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", *self._cluster(), "restart"],
            check=True,
        )

    def ensure_running(self) -> None:
        if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode != 0:
            subprocess.run(
                ["pg_ctlcluster", "--skip-systemctl-redirect", *self._cluster(), "start"]
            )
        for _ in range(30):
            if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0:
                return
            time.sleep(1)

    def _cluster(self) -> list[str]:
        """The local cluster (version, name) that serves DATABASE_URL's port."""
        port = str(self.url.port or 5432)
        listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True)
        for line in listing.stdout.splitlines():
            version, cluster, cluster_port, *_ = line.split()
            if cluster_port == port:
                return [version, cluster]
        raise SystemExit(f"chaos: no local PostgreSQL cluster on port {port} to restart")


class MariaDB(Database):
    """The local ``mariadbd``, stopped by ``mariadb-admin shutdown`` and started again as CI
    starts it (``start-stop-daemon``), with the URL's credentials."""

    name = "MariaDB"
    DAEMON = "/usr/sbin/mariadbd"
    #: ER_NO_SUCH_THREAD: the connection ended between the listing and its KILL.
    NO_SUCH_THREAD = 1094

    def prepare(self) -> None:
        # Unlike PostgreSQL's ``test``, a scratch database rarely exists yet: make it with
        # the character set and collation the test settings give MariaDB.
        name = unquote(self.url.path.lstrip("/")).replace("`", "``")
        subprocess.run(
            [*self._client("mariadb"), "-e", f"CREATE DATABASE IF NOT EXISTS `{name}` "
             "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"],
            env=self._env(), check=True,
        )  # fmt: skip

    def cut_connections(self) -> None:
        # No pg_terminate_backend(): list the database's connections, then KILL each.
        from django.db import DatabaseError, connection

        for _ in range(2):  # this process's own connection may be the one a fault cut
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT ID FROM information_schema.PROCESSLIST "
                        "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
                    )
                    for (thread,) in cursor.fetchall():
                        try:
                            cursor.execute(f"KILL CONNECTION {int(thread)}")
                        except DatabaseError as error:
                            if error.args[:1] != (self.NO_SUCH_THREAD,):
                                raise
                return
            except DatabaseError:
                connection.close()

    def restart(self) -> None:
        # A clean shutdown, as pg_ctlcluster's restart is; then wait for the process to be
        # gone, since start-stop-daemon --oknodo takes one still stopping for running.
        subprocess.run(
            [*self._client("mariadb-admin"), "shutdown"],
            env=self._env(), check=True,
        )  # fmt: skip
        for _ in range(120):
            if not self._running():
                break
            time.sleep(0.5)
        else:
            raise SystemExit("chaos: mariadbd still running 60 s after its shutdown")
        if not self._start():
            raise SystemExit("chaos: MariaDB does not answer 60 s after its start")

    def ensure_running(self) -> None:
        self._start()

    def _start(self) -> bool:
        """Start mariadbd unless it runs; whether it answers within 60 s."""
        for _ in range(60):
            if self._answers():
                return True
            if not self._running():  # not even starting (or stopping)
                subprocess.run(
                    ["start-stop-daemon", "--start", "--oknodo", "--background",
                     "--exec", self.DAEMON],
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
            time.sleep(1)
        return False

    def _answers(self) -> bool:
        ping = [*self._client("mariadb-admin"), "ping"]
        return subprocess.run(ping, env=self._env(), capture_output=True).returncode == 0

    def _running(self) -> bool:
        status = ["start-stop-daemon", "--status", "--exec", self.DAEMON]
        return subprocess.run(status).returncode == 0

    def _client(self, program: str) -> list[str]:
        """A MariaDB client program with DATABASE_URL's host, port and user."""
        return [program, "-h", self.url.hostname or "127.0.0.1", "-P", str(self.url.port or 3306),
                "-u", unquote(self.url.username or "root")]  # fmt: skip

    def _env(self) -> dict[str, str]:
        """The password in the environment, not on a command line others can read."""
        return {**os.environ, "MYSQL_PWD": unquote(self.url.password or "")}


def database_server(url: SplitResult) -> Database | None:
    """The server DATABASE_URL names, or None for one the run cannot break."""
    if url.scheme.startswith("postgres"):
        return PostgreSQL(url)
    if url.scheme in ("mysql", "mariadb"):
        return MariaDB(url)
    return None


def stop_redis() -> None:
    subprocess.run(["redis-cli", "shutdown", "nosave"], stdout=subprocess.DEVNULL)


def start_redis() -> None:
    subprocess.run(REDIS_START, check=True, stdout=subprocess.DEVNULL)


def restore_services(database: Database) -> None:
    """Leave the database server and Redis running, whatever happened."""
    if subprocess.run(["redis-cli", "ping"], capture_output=True).returncode != 0:
        subprocess.run(REDIS_START, stdout=subprocess.DEVNULL)
    database.ensure_running()
