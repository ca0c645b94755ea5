"""The statements every thread of this process runs while a block runs, seen from outside
the product: an ``execute_wrapper`` on each connection, those this thread has open and each
one a thread opens meanwhile (a worker on threads of this process opens its own)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created


@contextmanager
def watching(observe: Callable[[str], None]) -> Iterator[None]:
    """Call ``observe(sql)`` on the thread that runs each statement, until the block ends."""

    def wrapper(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        observe(sql)
        return execute(sql, *args)

    lock = threading.Lock()
    wrapped: list[BaseDatabaseWrapper] = []

    def wrap(connection: BaseDatabaseWrapper) -> None:
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)
            with lock:
                wrapped.append(connection)

    def on_connect(sender: object, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        wrap(connection)

    connection_created.connect(on_connect, weak=False)
    for connection in connections.all(initialized_only=True):
        wrap(connection)
    try:
        yield
    finally:
        connection_created.disconnect(on_connect)
        with lock:
            for connection in wrapped:
                if wrapper in connection.execute_wrappers:
                    connection.execute_wrappers.remove(wrapper)
