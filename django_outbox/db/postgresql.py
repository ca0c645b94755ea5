"""PostgreSQL."""

from __future__ import annotations

from django_outbox.db.base import Dialect


class PostgreSQL(Dialect):
    vendor = "postgresql"
    array_parameters = True
    skip_locked = True
    update_returning = True
    listen_notify = True
    row_estimates = True

    def json_array_of(self, sql: str) -> str:
        return f"jsonb_build_array({sql})"

    def json_append(self, column: str, item: str) -> str:
        return f"({column} || jsonb_build_array(({item})::jsonb))"

    def json_remove_last(self, column: str) -> str:
        return f"({column} - -1)"

    def random_token(self, most: int) -> str:
        return f"(1 + floor(random() * {most}))::integer"

    def event_type_matches(self, patterns: str) -> str:
        # LIKE with * turned into %, and _ (LIKE's other wildcard) escaped.
        return (
            f"(jsonb_array_length({patterns}) = 0 OR EXISTS (SELECT 1 FROM "
            f"jsonb_array_elements_text({patterns}) AS p(pattern) WHERE %s LIKE "
            "replace(replace(p.pattern, '_', '\\_'), '*', '%%') ESCAPE '\\'))"
        )
