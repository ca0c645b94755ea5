"""Cursor pagination: newest first, by id (the primary key's index serves the order, and
the tenant's filters narrow it), ``limit`` rows a page.

A cursor is signed (``SECRET_KEY``, a salt of its own) and names the tenant and the list it
was given for, so a cursor changed by hand, or from another tenant or another list, is
refused with a 400 saying so, never read as a position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core import signing
from django.db.models import Model, QuerySet

from django_outbox.portal.params import PAGE_SIZE
from django_outbox.portal.problems import Problem
from django_outbox.portal.scoping import Scope

SALT = "django_outbox.portal.cursor"
M = TypeVar("M", bound=Model)


def page(
    scope: Scope,
    kind: str,
    rows: QuerySet[M],
    params: dict[str, Any],
    present: Callable[[M], dict[str, Any]],
) -> dict[str, Any]:
    """``{"data": [...], "next_cursor": ... or None}``: the page of ``rows`` after the
    cursor in ``params``, each shown by ``present``."""
    limit = params.get("limit", PAGE_SIZE)
    if "cursor" in params:
        rows = rows.filter(pk__lt=read(params["cursor"], scope, kind))
    found = list(rows.order_by("-pk")[: limit + 1])
    shown = found[:limit]
    more = len(found) > limit
    return {
        "data": [present(row) for row in shown],
        "next_cursor": cursor(scope, kind, shown[-1].pk) if more else None,
    }


def cursor(scope: Scope, kind: str, after: int) -> str:
    return signing.dumps({"t": scope.tenant, "k": kind, "a": after}, salt=SALT)


def read(given: str, scope: Scope, kind: str) -> int:
    """The id a cursor goes on from; a 400 problem if it is not one of this list's."""
    try:
        claims = signing.loads(given, salt=SALT)
    except signing.BadSignature:
        raise _bad("it is not one this API gave (changed or cut short?)") from None
    if not isinstance(claims, dict) or not isinstance(claims.get("a"), int):
        raise _bad("it is not one this API gave")
    if claims.get("t") != scope.tenant:
        raise _bad("it was given to another tenant")
    if claims.get("k") != kind:
        raise _bad(f"it is for the list of {claims.get('k')}, not of {kind}")
    return int(claims["a"])


def _bad(why: str) -> Problem:
    return Problem(
        "bad-request",
        f"The cursor cannot be used: {why}. Pass a page's next_cursor as it is, to the list "
        "that gave it.",
        errors={"cursor": why[0].upper() + why[1:] + "."},
    )
