#!/usr/bin/env bash
# The whole test suite: migrations check, then pytest on SQLite, then on PostgreSQL, then on
# MariaDB (and its MySQL part), each server when reachable.
#
# PostgreSQL: DATABASE_URL if set, else postgres://postgres@127.0.0.1:5432/test when a
# server answers there. MariaDB (or MySQL): MARIADB_URL if set, else
# mysql://root@127.0.0.1:3306/test when a server answers there. With
# OUTBOX_REQUIRE_SERVICES=1 (CI) an unreachable server fails the run instead of skipping
# its half.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VENV_PYTHON:-.venv/bin/python}

echo "== makemigrations --check"
env -u DATABASE_URL "$PY" manage.py makemigrations --check --dry-run

pg_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
mariadb_url=${MARIADB_URL:-mysql://root@127.0.0.1:3306/test}

reachable() {
    "$PY" - "$1" <<'PYEOF'
import sys
from urllib.parse import unquote, urlsplit

url = sys.argv[1]
parts = urlsplit(url)
try:
    if parts.scheme.startswith("postgres"):
        import psycopg

        psycopg.connect(url.replace("postgres://", "postgresql://", 1), connect_timeout=3).close()
    else:
        import MySQLdb

        MySQLdb.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            connect_timeout=3,
        ).close()
except Exception as exc:
    print(f"{url} is not reachable: {exc}".strip(), file=sys.stderr)
    sys.exit(1)
PYEOF
}

# run NAME URL: the suite on the server at URL, or a skip (a failure under
# OUTBOX_REQUIRE_SERVICES=1) when none answers there.
run() {
    if reachable "$2"; then
        echo "== pytest on $1 ($2)"
        DATABASE_URL=$2 "$PY" -m pytest "${@:3}"
    elif [ "${OUTBOX_REQUIRE_SERVICES:-0}" = "1" ]; then
        echo "$1 is required here (OUTBOX_REQUIRE_SERVICES=1) but not reachable: failing." >&2
        return 1
    else
        echo "== SKIPPED the $1 run: no server reachable at $2."
    fi
}

echo "== pytest on SQLite"
env -u DATABASE_URL "$PY" -m pytest "$@"
# The PostgreSQL run keeps one TASKS alias's jobs in MariaDB beside it, when one answers
# (tests/test_databases.py).
if reachable "$mariadb_url" 2>/dev/null; then
    export OUTBOX_TEST_OTHER_URL=$mariadb_url
fi
run PostgreSQL "$pg_url" "$@"
unset OUTBOX_TEST_OTHER_URL
run MariaDB "$mariadb_url" "$@"

# MySQL's own code paths (no INSERT … RETURNING: ids from the first, or read then
# inserted) on the same MariaDB server: the tests of every way a job or an attempt is
# inserted. (A whole run, or none when pytest arguments pick tests.)
if [ $# = 0 ] && reachable "$mariadb_url" 2>/dev/null; then
    echo "== pytest on MariaDB with MySQL's inserts (OUTBOX_TEST_DIALECT=mysql)"
    OUTBOX_TEST_DIALECT=mysql DATABASE_URL=$mariadb_url "$PY" -m pytest -q \
        tests/test_enqueue.py tests/test_unique.py tests/test_backend.py \
        tests/test_webhooks_api.py tests/test_webhooks_delivery.py tests/test_mysql.py
fi
