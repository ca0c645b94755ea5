"""enqueue_many pauses Python's cyclic collector while it builds its objects, and only then."""

from __future__ import annotations

import gc

import pytest

import django_outbox
from django_outbox.exceptions import InvalidTaskArguments
from django_outbox.jobs import enqueue
from django_outbox.lib.collector import collector_paused
from tests import tasks


def test_the_collector_is_off_inside_and_on_again_after_even_on_an_error():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.django_db
def test_enqueue_many_leaves_the_collector_on_whether_it_wrote_or_refused(monkeypatch):
    seen = []
    real = enqueue._insert_alike

    def watching(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(enqueue, "_insert_alike", watching)
    assert len(django_outbox.enqueue_many(tasks.noop, [((), {})] * 3)) == 3
    with pytest.raises(InvalidTaskArguments):
        django_outbox.enqueue_many(tasks.noop, [((object(),), {})])
    assert seen == [False, False]
    assert gc.isenabled()
