"""SQLite, with its JSON functions."""

from __future__ import annotations

from django_outbox.db.base import Dialect


class SQLite(Dialect):
    vendor = "sqlite"
    array_parameters = False
    skip_locked = False
    update_returning = True
    listen_notify = False
    server_clock = False

    admits_one_per_key = True

    def admit_held(
        self, jobs: str, keys: str, among: str, turns: str, held: str, queued: str
    ) -> str | None:
        return self._admit(
            jobs, keys, among, turns, held, f"status = {queued}", "id, queue, run_at, limit_key"
        )

    def admit_held_taking(
        self,
        jobs: str,
        keys: str,
        among: str,
        turns: str,
        held: str,
        assignments: str,
        returning: str,
    ) -> str | None:
        return self._admit(jobs, keys, among, turns, held, assignments, returning)

    def _admit(
        self, jobs: str, keys: str, among: str, turns: str, held: str, assign: str, back: str
    ) -> str:
        # The oldest held job of each key with a free turn, by a seek per key; SQLite has
        # no LATERAL join to take several per key in one statement.
        return (
            f"UPDATE {jobs} SET {assign} WHERE status = {held} AND id IN ("
            f"SELECT (SELECT h.id FROM {jobs} AS h WHERE h.limit_key = k.key "
            f"AND h.status = {held} ORDER BY h.id LIMIT 1) FROM {keys} AS k "
            f'WHERE {among} AND k.held_by IS NULL AND k."limit" > (SELECT COUNT(*) '
            f"FROM {jobs} AS t WHERE t.limit_key = k.key AND t.status IN ({turns}))) "
            f"RETURNING {back}"
        )

    def greatest(self, *sql: str) -> str:
        return f"MAX({', '.join(sql)})"

    def least(self, *sql: str) -> str:
        return f"MIN({', '.join(sql)})"

    def json_append_text(self, column: str, text: str) -> str:
        return f"json_insert({column}, '$[#]', {text})"

    def json_array_of(self, sql: str) -> str:
        return f"json_array({sql})"

    def json_append(self, column: str, item: str) -> str:
        return f"json_insert({column}, '$[#]', json({item}))"

    def json_remove_last(self, column: str) -> str:
        return f"json_remove({column}, '$[#-1]')"

    def random_token(self, most: int) -> str:
        # random() is a signed 64-bit integer; the remainder keeps abs() from overflowing.
        return f"(abs(random() %% {most}) + 1)"

    def event_type_matches(self, patterns: str) -> str:
        # GLOB's * is the patterns' own wildcard, and it is case-sensitive.
        return (
            f"(json_array_length({patterns}) = 0 OR EXISTS (SELECT 1 FROM "
            f"json_each({patterns}) AS p WHERE %s GLOB p.value))"
        )
