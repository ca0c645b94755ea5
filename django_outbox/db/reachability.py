"""Whether a database answers, and when it does not, whether waiting could help.

A server that refuses the connection (down, restarting, not yet started) may answer in a
moment: a worker waits for it. A server that answers and says the database, the user or
the password in the settings is wrong will say the same thing tomorrow: a worker that waited
would look healthy and do nothing, so it stops and says what to correct.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import DatabaseError, connections

#: MySQL and MariaDB error numbers of a server that answered and refused the settings:
#: access denied to a database (1044), for a user and password (1045, 1698), unknown
#: database (1049).
MYSQL_REFUSED_SETTINGS = frozenset({1044, 1045, 1049, 1698})

#: PostgreSQL's connection errors carry no SQLSTATE in psycopg: its server's words.
POSTGRESQL_REFUSED_SETTINGS = re.compile(
    r'database ".*" does not exist|role ".*" does not exist|password authentication failed'
    r"|no pg_hba\.conf entry"
)


@dataclass(frozen=True, slots=True)
class Unreachable:
    #: The driver's error, its first line: "OperationalError: …".
    error: str
    #: The server answered and refused what the settings say: waiting will not help.
    permanent: bool


def where(using: str) -> str:
    """What the settings of alias ``using`` point at: ``'default' (database shop on
    127.0.0.1:5432)``, or ``'default' (the file /srv/db.sqlite3)``."""
    connection = connections[using]
    params = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"{using!r} (the file {params.get('NAME')})"
    place = params.get("HOST") or "localhost"
    if params.get("PORT"):
        place = f"{place}:{params['PORT']}"
    return f"{using!r} (database {params.get('NAME')} on {place})"


def first_line(exc: BaseException) -> str:
    """``OperationalError: …``: the kind of ``exc`` and the first line of its message."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


def unreachable(using: str) -> Unreachable | None:
    """None when the database of alias ``using`` answers; else why not."""
    connection = connections[using]
    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        connection.close()
        return Unreachable(first_line(exc), _refused_settings(connection.vendor, exc))
    return None


def _refused_settings(vendor: str, exc: DatabaseError) -> bool:
    if vendor == "mysql":
        return bool(exc.args) and exc.args[0] in MYSQL_REFUSED_SETTINGS
    if vendor == "postgresql":
        return POSTGRESQL_REFUSED_SETTINGS.search(str(exc)) is not None
    # SQLite opens a file: one it cannot open (a directory that does not exist, no
    # permission) stays so until someone changes the settings or the disk.
    return vendor == "sqlite"
