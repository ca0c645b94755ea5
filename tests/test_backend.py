import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.management.color import no_style
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

import django_outbox
from django_outbox.backend import OutboxBackend
from django_outbox.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_outbox.exceptions import InvalidTaskArguments
from django_outbox.lib.resultids import TOKEN_MAX, parse_result_id, result_id
from django_outbox.models import Job, JobStatus
from django_outbox.task import OutboxTask
from tests import tasks
from tests.conftest import ROOT
from tests.layout import one_table_only

pytestmark = pytest.mark.django_db


def test_the_backend_says_what_it_supports():
    backend = task_backends["default"]
    assert isinstance(backend, OutboxBackend)
    assert backend.supports_defer
    assert backend.supports_priority
    assert backend.supports_get_result
    assert backend.supports_async_task


def test_task_decorator_keywords_reach_the_task():
    assert isinstance(tasks.always_fails, OutboxTask)
    assert tasks.always_fails.max_attempts == 3
    assert tasks.overruns.timeout == 0.2
    assert tasks.always_fails.backoff_base == 0.01


def test_enqueue_stores_a_queued_job_with_the_tasks_options():
    result = tasks.add.using(priority=5, queue_name="emails").enqueue(2, b=3)
    job = Job.objects.for_result(result.id).get()
    assert (job.task_path, job.queue, job.priority, job.status) == (
        "tests.tasks.add",
        "emails",
        5,
        JobStatus.QUEUED,
    )
    assert (job.args, job.kwargs) == ([2], {"b": 3})
    assert result.status == TaskResultStatus.READY
    assert result.task.func is tasks.add.func


def test_per_task_options_and_defaults_are_stored():
    failing = tasks.always_fails.enqueue("x")
    plain = tasks.noop.enqueue()
    job, plain_job = (
        Job.objects.for_result(failing.id).get(),
        Job.objects.for_result(plain.id).get(),
    )
    assert (job.max_attempts, job.backoff_base, job.backoff_cap) == (3, 0.01, 0.02)
    assert plain_job.max_attempts == 3  # OUTBOX["DEFAULT_MAX_ATTEMPTS"]
    assert plain_job.timeout is None


def test_a_rollback_enqueues_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.enqueue()
        raise RuntimeError("the view failed")
    assert not Job.objects.exists()


def test_run_after_as_datetime_or_delay():
    at = timezone.now() + timedelta(hours=1)
    by_time = tasks.noop.using(run_after=at).enqueue()
    by_delay = tasks.noop.using(run_after=timedelta(minutes=10)).enqueue()
    assert Job.objects.for_result(by_time.id).get().run_at == at
    delayed = Job.objects.for_result(by_delay.id).get().run_at - timezone.now()
    assert timedelta(minutes=9) < delayed <= timedelta(minutes=10)


def test_naive_run_after_is_refused():
    with pytest.raises(InvalidTask, match="aware datetime"):
        tasks.noop.using(run_after=datetime(2030, 1, 1)).enqueue()
    assert not Job.objects.exists()


@pytest.mark.parametrize("priority", [101, -101, 1.5])
def test_priority_out_of_range_is_refused(priority):
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        tasks.noop.using(priority=priority).enqueue()
    assert not Job.objects.exists()


def test_unknown_queue_is_refused():
    with pytest.raises(InvalidTask, match="Queue 'nope' is not one of TASKS"):
        tasks.noop.using(queue_name="nope").enqueue()
    assert not Job.objects.exists()


def test_a_task_defined_inside_a_function_is_refused():
    with pytest.raises(InvalidTask, match="module level"):

        @task()
        def inner() -> None: ...


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be a whole number of at least 1"),
        ({"timeout": -1}, "timeout must be a number of seconds above 0"),
        ({"backoff_base": 10, "backoff_cap": 1}, "backoff_cap must not be below backoff_base"),
    ],
)
def test_bad_task_options_are_refused(options, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.noop.using(**options)


@pytest.mark.parametrize(
    "bad",
    [timezone.now(), object(), {1, 2}, float("nan"), b"\xff"],
    ids=["datetime", "object", "set", "nan", "binary"],
)
def test_arguments_json_cannot_hold_are_refused_and_nothing_is_stored(bad):
    tasks.noop.enqueue()
    with pytest.raises(InvalidTaskArguments, match="must be JSON-serialisable"):
        tasks.echo.enqueue(bad)
    with pytest.raises(InvalidTaskArguments):
        tasks.echo.enqueue(value={"nested": [bad]})
    assert Job.objects.count() == 1


def test_tuples_arrive_as_lists():
    result = tasks.echo.enqueue((1, 2), pair=("a", "b"))
    job = Job.objects.for_result(result.id).get()
    assert job.args == [[1, 2]] and job.kwargs == {"pair": ["a", "b"]}


def test_task_enqueued_signal_is_sent():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        result = tasks.noop.enqueue()
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [result.id]


def test_get_result_of_unknown_ids():
    for bad in ["999999", "999999-1f", "not-a-number", ""]:
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(bad)


def _roll_back_then_enqueue_on_its_primary_key(first, second):
    if connection.vendor == "mysql":
        pytest.skip(
            "MariaDB never hands a rolled-back id out again: InnoDB's AUTO_INCREMENT does "
            "not go back (resetting it is DDL, which would commit the test's transaction)"
        )
    """Enqueue with ``first`` in a transaction that rolls back, then with ``second``, which
    is given the rolled-back job's primary key: SQLite hands it out again by itself (its
    sequence rolls back with the insert); PostgreSQL does once its sequence is reset, as
    ``manage.py sqlsequencereset`` resets it."""
    tasks.noop.enqueue()  # kept: the reset sequence resumes after it
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = first.enqueue(1, 2)
        raise RuntimeError("the view failed")
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), [Job]):
            cursor.execute(sql)
    other = second.enqueue(3, 4)
    assert parse_result_id(other.id).pk == parse_result_id(rolled_back.id).pk
    return rolled_back, other


def test_a_rolled_back_jobs_id_does_not_name_the_job_given_its_key_next():
    rolled_back, other = _roll_back_then_enqueue_on_its_primary_key(tasks.add, tasks.echo)
    # Not TaskResultMismatch: the id names no job at all.
    with pytest.raises(TaskResultDoesNotExist, match="No job has the result id"):
        tasks.add.get_result(rolled_back.id)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(rolled_back.id)
    assert tasks.echo.get_result(other.id).args == [3, 4]


def test_a_rolled_back_jobs_id_never_reads_or_cancels_a_job_of_the_same_task():
    rolled_back, other = _roll_back_then_enqueue_on_its_primary_key(tasks.add, tasks.add)
    assert rolled_back.id != other.id
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(rolled_back.id)
    with pytest.raises(TaskResultDoesNotExist):
        django_outbox.cancel(rolled_back.id)
    assert Job.objects.for_result(rolled_back.id).count() == 0
    kept = tasks.add.get_result(other.id)
    assert (kept.args, kept.status) == ([3, 4], TaskResultStatus.READY)  # not cancelled


def test_every_enqueue_gives_its_job_a_random_token_and_the_id_names_it():
    results = [
        tasks.add.enqueue(1, 2),
        tasks.add.using(unique_key="sum").enqueue(1, 2),
        tasks.add.using(unique_key="sum").enqueue(1, 2),  # the job holding the key
        *django_outbox.enqueue_many(tasks.add, [((n, n), {}) for n in range(20)]),
    ]
    tokens = set()
    for result in results:
        job = Job.objects.for_result(result.id).get()
        assert 1 <= job.token <= TOKEN_MAX
        assert result.id == result_id(job.pk, job.token) == f"{job.pk}-{job.token:x}"
        assert tasks.add.get_result(result.id).id == result.id
        tokens.add(job.token)
    assert len(tokens) > 15  # drawn per row: 21 jobs, 31 bits each


def test_a_result_id_is_the_same_through_a_worker_run(run_worker):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_started.connect(receiver)
    task_finished.connect(receiver)
    try:
        result = tasks.report_attempt.enqueue()
        run_worker()
    finally:
        task_started.disconnect(receiver)
        task_finished.disconnect(receiver)
    assert seen == [result.id, result.id]  # task_started, task_finished
    done = tasks.report_attempt.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"attempt": 1, "id": result.id}  # what the task saw


def test_a_job_stored_before_tokens_existed_keeps_its_bare_primary_key_as_id(job_factory):
    old = job_factory(task_path="tests.tasks.add", token=0)
    new = job_factory(task_path="tests.tasks.add")
    assert tasks.add.get_result(str(old.pk)).id == str(old.pk)
    assert Job.objects.for_result(str(old.pk)).get() == old
    # A bare primary key names a row without a token only; a token of 0 is never written.
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(str(new.pk))
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(f"{old.pk}-0")


@one_table_only
@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_rows_already_stored_token_0():
    executor = MigrationExecutor(connection)
    executor.migrate([("django_outbox", "0007_job_trace_context")])
    try:
        old_job = executor.loader.project_state(("django_outbox", "0007_job_trace_context"))
        stored = old_job.apps.get_model("django_outbox", "Job").objects.create(
            task_path="tests.tasks.add", args=[1, 2]
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes("django_outbox"))
    job = Job.objects.get(pk=stored.pk)
    assert job.token == 0
    assert tasks.add.get_result(str(job.pk)).args == [1, 2]  # the id it was given before


@one_table_only
@pytest.mark.django_db(transaction=True)
def test_code_older_than_the_token_still_enqueues_once_the_migration_has_run():
    """A rolling upgrade: the migrations have run, and a web process still runs code that
    does not know ``Job.token``. Its insert gets token 0 (a bare-number id), not an error."""
    executor = MigrationExecutor(connection)
    before_token = executor.loader.project_state(("django_outbox", "0007_job_trace_context"))
    old_code_job = before_token.apps.get_model("django_outbox", "Job")
    stored = old_code_job.objects.create(task_path="tests.tasks.add", args=[3, 4])
    job = Job.objects.get(pk=stored.pk)
    assert job.token == 0
    assert tasks.add.get_result(str(job.pk)).args == [3, 4]


def test_get_result_shows_the_stored_state(job_factory):
    job = job_factory(
        task_path="tests.tasks.add",
        status=JobStatus.FAILED,
        worker_ids=["w1", "w2"],
        errors=[
            {
                "exception_class_path": "builtins.ValueError",
                "traceback": "Traceback...\nValueError: x",
            }
        ],
    )
    result = tasks.add.get_result(result_id(job.pk, job.token))
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2
    assert result.errors[0].exception_class is ValueError
    assert "ValueError: x" in result.errors[0].traceback


def test_aenqueue_and_aget_result():
    async def enqueue_then_fetch():
        result = await tasks.add.aenqueue(1, 2)
        return await tasks.add.aget_result(result.id)

    fetched = async_to_sync(enqueue_then_fetch)()
    assert fetched.status == TaskResultStatus.READY
    assert fetched.args == [1, 2]


def test_importing_the_backend_does_not_import_models():
    code = (
        "import sys, django.conf;"
        "django.conf.settings.configure();"
        "import django_outbox.backend;"
        "assert 'django_outbox.models' not in sys.modules, 'models imported';"
        "print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_dict_keys_json_would_turn_into_strings_are_refused():
    with pytest.raises(InvalidTaskArguments, match="dict key that is not a string"):
        tasks.echo.enqueue({1: "a"})
    with pytest.raises(InvalidTaskArguments, match="dict key that is not a string"):
        tasks.echo.enqueue(nested=[{"ok": {2: "b"}}])
    assert not Job.objects.exists()


@pytest.mark.parametrize("bad", ["nul\x00byte", "\ud800 lone surrogate"], ids=["nul", "surrogate"])
def test_strings_no_database_can_store_are_refused(bad):
    with pytest.raises(InvalidTaskArguments, match="must be JSON-serialisable"):
        tasks.echo.enqueue(bad)
    assert not Job.objects.exists()


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e300])
def test_timeouts_and_backoffs_must_be_finite_and_sane(value):
    for option in ("timeout", "backoff_base", "backoff_cap"):
        with pytest.raises(InvalidTask, match=f"{option} must be a number of seconds above 0"):
            tasks.noop.using(**{option: value})


def test_the_webhooks_queue_is_served_by_default():
    from django_outbox.compat import task_backends

    assert "webhooks" in task_backends["default"].queues


def test_stored_results_are_what_task_result_itself_would_build(run_worker, monkeypatch):
    """Results of stored jobs skip TaskResult.__init__ (its arguments are JSON already);
    they must equal what __init__ builds, which is also the way taken should Django's
    TaskResult gain or lose a field."""
    from django_outbox.jobs import results

    done = tasks.echo.enqueue(1, [2, {"three": 3}], four="4")
    failed = tasks.always_fails.enqueue("no")
    Job.objects.for_result(failed.id).update(max_attempts=1)
    run_worker()
    fast = [tasks.echo.get_result(done.id), tasks.always_fails.get_result(failed.id)]
    monkeypatch.setattr(results, "_RESULT_FIELDS", results._RESULT_FIELDS | {"new_field"})
    built = [tasks.echo.get_result(done.id), tasks.always_fails.get_result(failed.id)]
    assert fast == built
    assert (
        fast[0].return_value
        == built[0].return_value
        == {
            "args": [1, [2, {"three": 3}]],
            "kwargs": {"four": "4"},
        }
    )
    assert fast[1].errors[0].exception_class_path == "builtins.ValueError"


def test_a_backend_built_while_outbox_was_invalid_serves_the_webhooks_queue_once_it_is_right(
    settings,
):
    """Built under a bad OUTBOX (system check E001's case), the backend did not know the
    webhooks' queue, and refused every delivery job once OUTBOX was fixed."""
    from django.test import override_settings

    with override_settings(OUTBOX={"WEBHOOKS": {"QUEUE": 5}}):
        backend = OutboxBackend("default", settings.TASKS["default"])
    assert "webhooks" not in backend.queues
    from django_outbox.webhooks.tasks import deliver

    backend.validate_task(deliver)  # no InvalidTask: the queue is served after all
    assert "webhooks" in backend.queues
