#!/usr/bin/env bash
# The whole test suite: migrations check, then pytest on SQLite, then on PostgreSQL.
#
# PostgreSQL: DATABASE_URL if set, else postgres://postgres@127.0.0.1:5432/test when a
# server answers there. With OUTBOX_REQUIRE_SERVICES=1 (CI) an unreachable server fails
# the run instead of skipping the PostgreSQL half.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VENV_PYTHON:-.venv/bin/python}

echo "== makemigrations --check"
env -u DATABASE_URL "$PY" manage.py makemigrations --check --dry-run

url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
pg_up() {
    "$PY" - "$url" <<'PYEOF'
import sys
import psycopg
try:
    psycopg.connect(sys.argv[1].replace("postgres://", "postgresql://", 1), connect_timeout=3).close()
except Exception as exc:
    print(f"PostgreSQL at {sys.argv[1]} is not reachable: {exc}".strip(), file=sys.stderr)
    sys.exit(1)
PYEOF
}

echo "== pytest on SQLite"
env -u DATABASE_URL "$PY" -m pytest "$@"

if pg_up; then
    echo "== pytest on PostgreSQL ($url)"
    DATABASE_URL=$url "$PY" -m pytest "$@"
elif [ "${OUTBOX_REQUIRE_SERVICES:-0}" = "1" ]; then
    echo "PostgreSQL is required here (OUTBOX_REQUIRE_SERVICES=1) but not reachable: failing." >&2
    exit 1
else
    echo "== SKIPPED the PostgreSQL run: no server reachable at $url (set DATABASE_URL to use one)."
fi
