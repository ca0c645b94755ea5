"""django_outbox's pytest plugin: its test helpers as fixtures (see docs/testing.md).

Loaded on its own once django_outbox is installed (the ``pytest11`` entry point). The
tests that use the fixtures need the database, as any test that enqueues does
(``@pytest.mark.django_db``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def outbox_run_jobs() -> Callable[..., Any]:
    """``django_outbox.testing.run_jobs``: run every due job now, in the test."""
    from django_outbox.testing import run_jobs

    return run_jobs


@pytest.fixture
def outbox_assert_enqueued() -> Callable[..., Any]:
    """``django_outbox.testing.assert_enqueued``: check a job was enqueued."""
    from django_outbox.testing import assert_enqueued

    return assert_enqueued


@pytest.fixture
def outbox_webhooks() -> Iterator[Any]:
    """The webhook requests deliveries send during the test, answered 200, without HTTP
    (``django_outbox.testing.captured_webhooks()`` for the whole test)."""
    from django_outbox.testing import captured_webhooks

    with captured_webhooks() as captured:
        yield captured
