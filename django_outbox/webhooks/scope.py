"""The database the webhooks' public functions run in: that of the webhooks' TASKS alias
(``OUTBOX["WEBHOOKS"]["BACKEND"]``; see db/routing.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.db import router

from django_outbox import conf
from django_outbox.db.routing import jobs_of
from django_outbox.models import Message


def using() -> str:
    """The alias of the database the webhooks' rows are written to."""
    return router.db_for_write(Message)


_F = TypeVar("_F", bound=Callable[..., Any])


def in_webhooks_database(function: _F) -> _F:
    """Run ``function`` with django_outbox's models in the database of the webhooks'
    TASKS alias."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with jobs_of(conf.get().WEBHOOKS.BACKEND):
            return function(*args, **kwargs)

    return cast(_F, wrapper)
