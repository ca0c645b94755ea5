import math
import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import django_outbox
from django_outbox.compat import BACKPORT
from django_outbox.exceptions import InvalidTaskArguments
from django_outbox.lib.resultids import result_id
from django_outbox.models import Job
from tests import tasks

pytestmark = pytest.mark.django_db


def inserts(queries):
    """The INSERTs, named (``/* outbox:enqueue */ INSERT …``) or not."""
    return [q for q in queries if re.match(r"(/\*[^*]*\*/ )?INSERT", q["sql"].lstrip(), re.I)]


def rows_per_insert() -> int:
    """1,000, except where Django caps a statement's parameters lower: Django 5.2 allows an
    SQLite statement 999 of them (6.0 asks SQLite, which allows 32,766), so ~38 rows."""
    fields = [f for f in Job._meta.concrete_fields if not f.primary_key]
    return min(1000, connection.ops.bulk_batch_size(fields, [None] * 1000))


def test_enqueue_many_uses_one_insert_per_thousand_rows():
    if connection.vendor == "postgresql" or not BACKPORT:
        assert rows_per_insert() == 1000
    with CaptureQueriesContext(connection) as queries:
        results = django_outbox.enqueue_many(tasks.add, [((i, i), {}) for i in range(2500)])
    assert len(inserts(queries.captured_queries)) == math.ceil(2500 / rows_per_insert())
    assert len(results) == 2500
    assert sorted(Job.objects.values_list("args", flat=True))[:2] == [[0, 0], [1, 1]]
    stored = Job.objects.values_list("pk", "token")
    assert {r.id for r in results} == {result_id(pk, token) for pk, token in stored}


def test_enqueue_many_gives_each_result_its_own_job():
    """Each result names the row holding its own call's arguments, across statements, and
    reads back as it was returned."""
    calls = [((n, f"call {n}"), {"n": n, "nested": [n, {"x": n}]}) for n in range(2345)]
    results = django_outbox.enqueue_many(tasks.echo, calls)
    stored = {
        result_id(pk, token): (args, kwargs)
        for pk, token, args, kwargs in Job.objects.values_list("pk", "token", "args", "kwargs")
    }
    assert len(stored) == len(results) == 2345
    for (args, kwargs), result in zip(calls, results, strict=True):
        assert stored[result.id] == (list(args), kwargs)
        assert (result.args, result.kwargs) == (list(args), kwargs)
    assert tasks.echo.get_result(results[-1].id) == results[-1]
    (row,) = Job.objects.filter(args=[7, "call 7"]).values("status", "backend", "queue")
    assert row == {"status": "queued", "backend": "default", "queue": "default"}


def test_enqueue_many_stores_the_json_enqueue_stores():
    """The same text as Django's JSONField writes, so lookups find rows however they were
    enqueued (SQLite and MariaDB keep the text as written)."""
    tasks.echo.enqueue("é", k="ü")
    django_outbox.enqueue_many(tasks.echo, [(("é",), {"k": "ü"})])
    assert Job.objects.filter(args=["é"], kwargs={"k": "ü"}).count() == 2


def test_enqueue_many_is_all_or_nothing():
    calls = [((1, 2), {})] * 1500 + [((object(), 2), {})]
    with pytest.raises(InvalidTaskArguments):
        django_outbox.enqueue_many(tasks.add, calls)
    assert not Job.objects.exists()


def test_enqueue_many_refuses_items_that_are_not_pairs():
    with pytest.raises(InvalidTaskArguments, match=r"item 1 is \(1, 2, 3\)"):
        django_outbox.enqueue_many(tasks.add, [((1, 2), {}), (1, 2, 3)])
    assert not Job.objects.exists()


def test_enqueue_many_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        django_outbox.enqueue_many(tasks.noop, [((), {})] * 10)
        raise RuntimeError("rolled back")
    assert not Job.objects.exists()


def test_enqueue_many_validates_the_task_first():
    with pytest.raises(Exception, match="Queue 'nope' is not one of TASKS"):
        django_outbox.enqueue_many(tasks.noop.using(queue_name="nope"), [((), {})])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("django.core.management.commands.shell", "was defined in manage.py shell"),
        ("__main__", "was defined in a script run as __main__"),
        ("reports.gone", "where a worker importing 'reports.gone' would not find it"),
    ],
)
def test_a_task_a_worker_could_not_import_is_refused_at_enqueue(module, says):
    """As manage.py shell runs what is typed at it: the function is at the top of a module
    (Django accepts it as a task), but not of one a worker can import it from."""
    from django_outbox import workflows
    from django_outbox.compat import InvalidTask, task

    namespace = {"__name__": module, "task": task}
    exec("@task\ndef greet(name):\n    return name", namespace)
    greet = namespace["greet"]
    assert greet.module_path == f"{module}.greet"
    for enqueue in (
        lambda: greet.enqueue("Ada"),
        lambda: django_outbox.enqueue_many(greet, [(("Ada",), {})] * 3),
        lambda: greet.using(queue_name="default").enqueue("Ada"),
        lambda: workflows.chain(workflows.step(tasks.add, 1, 2), workflows.step(greet)).enqueue(),
    ):
        with pytest.raises(InvalidTask, match=rf"{re.escape(says)}.*myapp/tasks\.py"):
            enqueue()
    assert not Job.objects.exists()
    tasks.add.enqueue(1, 2)  # a task of a module is importable, and enqueued
    assert Job.objects.count() == 1
