#!/usr/bin/env bash
# The whole test suite: migrations check, then pytest on SQLite, then on PostgreSQL and on
# MariaDB at once (and MySQL's part on MariaDB, the engine's on a partitioned PostgreSQL
# job table), each server when reachable.
#
# PostgreSQL: DATABASE_URL if set, else postgres://postgres@127.0.0.1:5432/test when a
# server answers there. MariaDB (or MySQL): MARIADB_URL if set, else
# mysql://root@127.0.0.1:3306/test when a server answers there. With
# OUTBOX_REQUIRE_SERVICES=1 (CI) an unreachable server fails the run instead of skipping
# its part. OUTBOX_TEST_REDIS_URL (default redis://127.0.0.1:6379/15) ends with the Redis
# database number of the runs; the MariaDB run takes the one below it.
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

# run NAME URL [pytest args]: the suite on the server at URL, or a skip (a failure under
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

# PostgreSQL and MariaDB at once: their runs wait on worker processes and servers more than
# they compute. Each has its own test databases; the MariaDB run takes the Redis database
# below the PostgreSQL run's (15 and 14 by default).
redis_url=${OUTBOX_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}
mariadb_redis_url="${redis_url%/*}/$(( ${redis_url##*/} - 1 ))"
# OUTBOX_TEST_SERVER_TESTS (pytest arguments: test files) narrows the PostgreSQL and MariaDB
# runs to those tests when no pytest arguments pick others: CI's Django 5.2 row runs there
# the tests of what speaks their SQL, the 6.1 row the whole suite.
server_args=("$@")
if [ $# = 0 ] && [ -n "${OUTBOX_TEST_SERVER_TESTS:-}" ]; then
    read -r -a server_args <<<"$(tr "\n" " " <<<"$OUTBOX_TEST_SERVER_TESTS")"
fi
pg_log=$(mktemp)
(
    # The PostgreSQL run keeps one TASKS alias's jobs in MariaDB beside it, when one
    # answers (tests/test_databases.py).
    if reachable "$mariadb_url" 2>/dev/null; then
        export OUTBOX_TEST_OTHER_URL=$mariadb_url
    fi
    OUTBOX_TEST_REDIS_URL=$redis_url run PostgreSQL "$pg_url" "${server_args[@]}"
) >"$pg_log" 2>&1 &
pg=$!

# MySQL's own code paths (no INSERT … RETURNING: ids from the first, or read then
# inserted) on the same MariaDB server: the tests of every way a job or an attempt is
# inserted. (A whole run, or none when pytest arguments pick tests; OUTBOX_TEST_MYSQL=0
# leaves it to another run.) Beside the two runs above, on a test database and a Redis
# database of its own (four below the PostgreSQL run's).
mysql=""
if [ $# = 0 ] && [ "${OUTBOX_TEST_MYSQL:-1}" = 1 ] && reachable "$mariadb_url" 2>/dev/null; then
    mysql_log=$(mktemp)
    (
        echo "== pytest on MariaDB with MySQL's inserts (OUTBOX_TEST_DIALECT=mysql)"
        OUTBOX_TEST_DIALECT=mysql OUTBOX_TEST_MARIADB_NAME="${OUTBOX_TEST_MARIADB_NAME:-test_outbox}_mysql" \
            OUTBOX_TEST_REDIS_URL="${redis_url%/*}/$(( ${redis_url##*/} - 4 ))" DATABASE_URL=$mariadb_url \
            "$PY" -m pytest -q tests/test_enqueue.py tests/test_unique.py tests/test_webhooks_api.py \
            tests/test_webhooks_delivery.py tests/test_mysql.py
    ) >"$mysql_log" 2>&1 &
    mysql=$!
fi

# The engine's tests on PostgreSQL again, against the job table partitioned by status and
# day (OUTBOX_TEST_PARTITIONED=1, manage.py outbox_partition): a whole run, or none when
# pytest arguments pick tests; OUTBOX_TEST_PARTITIONED_RUN=0 leaves it to another run. On a
# test database and a Redis database of its own (five below the PostgreSQL run's).
partitioned=""
if [ $# = 0 ] && [ "${OUTBOX_TEST_PARTITIONED_RUN:-1}" = 1 ] && reachable "$pg_url" 2>/dev/null; then
    partitioned_log=$(mktemp)
    (
        echo "== pytest on PostgreSQL with a partitioned job table (OUTBOX_TEST_PARTITIONED=1)"
        OUTBOX_TEST_PARTITIONED=1 OUTBOX_TEST_PG_NAME="${OUTBOX_TEST_PG_NAME:-test_outbox}_partitioned" \
            OUTBOX_TEST_REDIS_URL="${redis_url%/*}/$(( ${redis_url##*/} - 5 ))" DATABASE_URL=$pg_url \
            "$PY" -m pytest -q tests/test_partitions.py tests/test_retention.py tests/test_claim.py \
            tests/test_complete.py tests/test_unique.py tests/test_leases.py tests/test_backend.py \
            tests/test_cancel.py tests/test_workflows.py tests/test_keys.py tests/test_enqueue.py \
            tests/test_worker.py tests/test_tasks_contract.py tests/test_batches.py
    ) >"$partitioned_log" 2>&1 &
    partitioned=$!
fi

failed=0
OUTBOX_TEST_REDIS_URL=$mariadb_redis_url run MariaDB "$mariadb_url" "${server_args[@]}" || failed=1
if [ -n "$mysql" ]; then
    wait $mysql || failed=1
    cat "$mysql_log"
    rm -f "$mysql_log"
fi
if [ -n "$partitioned" ]; then
    wait $partitioned || failed=1
    cat "$partitioned_log"
    rm -f "$partitioned_log"
fi
wait $pg || failed=1
cat "$pg_log"
rm -f "$pg_log"
exit $failed
