"""What every dialect says about its database (see ``django_outbox.db``)."""

from __future__ import annotations

from abc import ABC, abstractmethod


class Dialect(ABC):
    #: Django's name for the database (``connection.vendor``).
    vendor: str
    #: Arrays as statement parameters (``= ANY(%s::bigint[])``, ``unnest(%s::text[])``):
    #: one statement text for any number of rows, which the driver converts once. Without
    #: them, batched statements spell out a placeholder per row.
    array_parameters: bool
    #: ``SELECT … FOR UPDATE SKIP LOCKED``: claimers pass over each other's rows. Without
    #: it, a claim is one writer at a time (SQLite's database lock).
    skip_locked: bool
    #: ``UPDATE … RETURNING``: a claim marks and reads its rows in one statement.
    update_returning: bool
    #: ``LISTEN``/``NOTIFY``: commits wake workers through the database itself.
    listen_notify: bool
    #: The planner's row estimate is cheap to read (the admin shows it for big tables
    #: instead of counting).
    row_estimates: bool

    @abstractmethod
    def json_array_of(self, sql: str) -> str:
        """A JSON array holding the value of ``sql``."""

    @abstractmethod
    def json_append(self, column: str, item: str) -> str:
        """``column`` (quoted) with the JSON value ``item`` (SQL giving JSON text) added
        at the end of its array."""

    @abstractmethod
    def json_remove_last(self, column: str) -> str:
        """``column`` (quoted) without the last element of its JSON array."""

    @abstractmethod
    def random_token(self, most: int) -> str:
        """A whole number from 1 to ``most``, drawn for each row, for statements that write
        rows Python never sees (``%`` doubled: they run with parameters)."""

    @abstractmethod
    def event_type_matches(self, patterns: str) -> str:
        """True when the event type (the statement's next parameter) matches one of the
        patterns in the JSON array column ``patterns``, or the array is empty. Patterns
        hold ``*`` as their only wildcard; matching is case-sensitive."""
