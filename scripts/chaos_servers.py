"""The servers the chaos run breaks and mends: its database server and Redis.

A database server is one class here, picked by DATABASE_URL's scheme: how to cut every
connection to the run's database but the driver's own, how to restart the server, and how
to leave it running at the end whatever happened. The driver (``chaos.py``) only names the
fault; what it takes on each server lives here.
"""

from __future__ import annotations

import subprocess
import time
from urllib.parse import SplitResult

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


def database_server(url: SplitResult) -> Database | None:
    """The server DATABASE_URL names, or None for one the run cannot break."""
    if url.scheme.startswith("postgres"):
        return PostgreSQL(url)
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
