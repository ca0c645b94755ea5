"""``python manage.py demo``: django_outbox end to end, in one process.

1. Clear the demo data (jobs, stopped worker records, customers, orders, webhooks).
2. Enqueue jobs the real way, through the shop's views with ``django.test.Client``:
   sign-ups enqueue ``send_welcome``, orders enqueue ``render_invoice`` (orders over 900
   always fail) and send an ``order.placed`` webhook to two endpoints on a local
   receiver that fails the first two requests of each delivery, so retries show.
   A transaction that rolls back is shown to enqueue nothing.
3. Run burst workers in a background thread until every job has finished, with a
   progress bar on stdout.
4. Print a summary per task, with example errors of failed jobs.
5. Make sure the superuser admin/admin exists and, unless ``--no-serve``, serve the admin,
   opening onto the outbox dashboard.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.db.models import Count, Min, Q, Sum
from django.test import Client, override_settings
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.compat import LOGGER_NAME, task_backends
from django_outbox.management.commands.runworker import non_negative_int, positive_int
from django_outbox.models import (
    Attempt,
    Delivery,
    DeliveryStatus,
    Endpoint,
    Job,
    JobStatus,
    Message,
)
from django_outbox.models import Worker as WorkerRecord
from django_outbox.models.jobs import ACTIVE_STATUSES
from django_outbox.worker import Worker
from django_outbox.worker.loop import WorkerStats
from outbox_bench import receiver
from testproject.shop.models import Customer, Order

CONCURRENCY = 4
#: Seconds between progress updates.
POLL_SECONDS = 0.2
#: Seconds between plain progress lines when stdout is not a terminal.
PLAIN_LINE_SECONDS = 1.0
BAR_WIDTH = 30
#: One order in this many is over 900, so its invoice fails every attempt.
FAILING_ORDER_EVERY = 25
FINISHED_STATUSES = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]
#: Loggers whose lines would break the progress bar.
WORKER_LOGGERS = ("django_outbox", LOGGER_NAME)
DASHBOARD_URL = "http://127.0.0.1:8000/admin/django_outbox/dashboard/"
#: The demo's receiver fails this many requests of each delivery before it answers 200.
RECEIVER_FAILS_FIRST = 2
#: A quick retry schedule for the demo (the default waits 5 s, then 5 minutes, ...).
DEMO_RETRY_SCHEDULE = [0, 0.3, 0.6, 1.2, 2.4]


# -- 1. a clean slate ------------------------------------------------------------------


def clear_demo_data() -> dict[str, int]:
    """Delete the demo's rows; returns how many of each kind went (rows deleted with them,
    such as a message's deliveries and their attempts, counted under their own names)."""
    counts: dict[str, int] = {}

    def delete(queryset: Any) -> None:
        _total, per_model = queryset.delete()
        for label, count in per_model.items():
            name = LABELS.get(label, label)
            counts[name] = counts.get(name, 0) + count

    with transaction.atomic():
        delete(Job.objects.all())
        delete(WorkerRecord.objects.filter(stopped_at__isnull=False))
        delete(Order.objects.all())
        delete(Customer.objects.all())
        delete(Message.objects.all())
        delete(Endpoint.objects.all())
    return {name: count for name, count in counts.items() if count}


#: What clear_demo_data() calls each model's rows.
LABELS = {
    "django_outbox.Job": "jobs",
    "django_outbox.Worker": "stopped worker records",
    "shop.Order": "orders",
    "shop.Customer": "customers",
    "django_outbox.Message": "webhook messages",
    "django_outbox.Delivery": "deliveries",
    "django_outbox.Attempt": "delivery attempts",
    "django_outbox.Endpoint": "webhook endpoints",
    "django_outbox.EndpointHour": "hourly endpoint counts",
}


# -- 2. enqueueing through the views ---------------------------------------------------


def demo_email(number: int) -> str:
    return f"customer{number:04d}@example.com"


def order_amounts(count: int, rng: random.Random) -> list[Decimal]:
    """Mostly ordinary amounts; one in FAILING_ORDER_EVERY (at least one) is over 900."""
    amounts = [Decimal(rng.randint(500, 40_000)) / 100 for _ in range(count)]
    failing = min(count, max(1, count // FAILING_ORDER_EVERY)) if count else 0
    for position in rng.sample(range(count), failing):
        amounts[position] = Decimal(rng.randint(90_100, 99_900)) / 100
    return amounts


def post(client: Client, path: str, data: dict[str, str], expected: int) -> dict[str, Any]:
    response = client.post(path, data)
    if response.status_code != expected:
        raise CommandError(
            f"POST {path} {data} answered {response.status_code}, not {expected}: "
            f"{response.content.decode(errors='replace')[:200]}"
        )
    body: dict[str, Any] = response.json()
    return body


def sign_up(client: Client, count: int) -> list[str]:
    emails = [demo_email(number) for number in range(1, count + 1)]
    for email in emails:
        post(client, "/signup/", {"email": email}, 201)
    return emails


def place_orders(client: Client, emails: list[str], count: int, rng: random.Random) -> int:
    """Place ``count`` orders; returns how many are over 900."""
    amounts = order_amounts(count, rng)
    for amount in amounts:
        post(client, "/orders/", {"email": rng.choice(emails), "amount": str(amount)}, 201)
    return sum(amount > 900 for amount in amounts)


def counts() -> tuple[int, int]:
    return Job.objects.count(), Customer.objects.count()


class Rollback(Exception):
    """Raised to roll a demo transaction back."""


def conflicting_signup(client: Client, email: str) -> str:
    """An existing email: the view answers 409 and enqueues nothing."""
    before = counts()
    with quiet_loggers("django.request"):  # it logs every 4xx answer as a warning
        post(client, "/signup/", {"email": email}, 409)
    after = counts()
    verdict = "nothing enqueued" if after == before else "UNEXPECTED: something changed"
    return (
        f"signing up {email} again: 409; jobs {before[0]} -> {after[0]}, "
        f"customers {before[1]} -> {after[1]} ({verdict})"
    )


def rolled_back_signup(client: Client) -> str:
    """A sign-up inside a transaction that then rolls back: its job goes with it."""
    email = "rolled.back@example.com"
    before = counts()
    body: dict[str, Any] = {}
    try:
        with transaction.atomic():
            body = post(client, "/signup/", {"email": email}, 201)
            raise Rollback
    except Rollback:
        pass
    after = counts()
    job_gone = not Job.objects.for_result(body["job"]).exists()
    customer_gone = not Customer.objects.filter(email=email).exists()
    verdict = (
        "nothing enqueued"
        if job_gone and customer_gone and after == before
        else "UNEXPECTED: something stayed"
    )
    return (
        f"signing up {email} inside a transaction that rolls back: the view answered 201 "
        f"with job {body['job']}; after the rollback jobs {before[0]} -> {after[0]}, "
        f"customers {before[1]} -> {after[1]} ({verdict})"
    )


# -- 3. draining the queues ------------------------------------------------------------


@dataclass(slots=True)
class Progress:
    total: int
    queued: int = 0
    retrying: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    #: When the next job waiting to retry is due.
    next_retry: datetime | None = None

    @property
    def finished(self) -> int:
        return self.total - self.queued - self.running

    @classmethod
    def read(cls) -> Progress:
        totals = Job.objects.aggregate(
            total=Count("id"),
            queued=Count("id", filter=Q(status=JobStatus.QUEUED)),
            retrying=Count("id", filter=Q(status=JobStatus.QUEUED, attempts__gt=0)),
            running=Count("id", filter=Q(status=JobStatus.RUNNING)),
            succeeded=Count("id", filter=Q(status=JobStatus.SUCCEEDED)),
            failed=Count("id", filter=Q(status__in=[JobStatus.FAILED, JobStatus.CANCELLED])),
            next_retry=Min("run_at", filter=Q(status=JobStatus.QUEUED, attempts__gt=0)),
        )
        return cls(**totals)

    def line(self, elapsed: float) -> str:
        share = self.finished / self.total if self.total else 1.0
        filled = int(BAR_WIDTH * share)  # full only when every job has finished
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        return (
            f"[{bar}] {self.finished:>4}/{self.total} {int(100 * share):3d}%  "
            f"ok {self.succeeded}  failed {self.failed}  running {self.running}  "
            f"waiting to retry {self.retrying}{self.retry_note()}  {elapsed:5.1f} s"
        )

    def retry_note(self) -> str:
        """While only retries are left, when the next one is due: the bar stands still
        for their backoff, and says why."""
        if self.running or self.next_retry is None or self.queued > self.retrying:
            return ""
        wait = (self.next_retry - timezone.now()).total_seconds()
        return f" (backoff: next in {wait:.1f} s)" if wait > 0 else ""


def seconds_until_next_due() -> float:
    """How long until the earliest queued job is due (0 when one is due now)."""
    earliest = Job.objects.filter(status=JobStatus.QUEUED).aggregate(at=Min("run_at"))["at"]
    if earliest is None:
        return POLL_SECONDS  # running jobs only (e.g. a lease being rescued): look again soon
    return max(0.0, (earliest - timezone.now()).total_seconds())


@dataclass
class Drain:
    """Burst workers, one round after another, until no job is queued or running.

    A burst worker leaves when nothing is due; retries come due a little later, so the
    drain waits for the next due time between rounds. Meant to run in its own thread.
    """

    queues: list[str]
    concurrency: int = CONCURRENCY
    rounds: list[WorkerStats] = field(default_factory=list)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _worker: Worker | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                self.rounds.append(self._round())
                if not Job.objects.filter(status__in=ACTIVE_STATUSES).exists():
                    return
                self._stop.wait(min(seconds_until_next_due(), 1.0) + 0.02)
        except BaseException as exc:  # handed to the main thread, which reports it
            self.error = exc
        finally:
            connection.close()  # this thread's own connection

    def _round(self) -> WorkerStats:
        worker = Worker(queues=self.queues, concurrency=self.concurrency, burst=True)
        with self._lock:
            self._worker = worker
        if self._stop.is_set():
            return worker.stats
        return worker.run()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._worker is not None:
                self._worker.request_stop("the demo was interrupted")


@contextmanager
def demo_retry_schedule() -> Iterator[None]:
    """Retries within seconds, so the demo shows them without waiting minutes."""
    outbox = dict(getattr(settings, "OUTBOX", {}))
    hooks = {**outbox.get("WEBHOOKS", {}), "RETRY_SCHEDULE": DEMO_RETRY_SCHEDULE}
    with override_settings(OUTBOX={**outbox, "WEBHOOKS": hooks}):
        yield


@contextmanager
def quiet_loggers(*names: str, level: int = logging.CRITICAL) -> Iterator[None]:
    """Raise the loggers' level for a while, e.g. so they do not break the progress bar."""
    loggers = [logging.getLogger(name) for name in names]
    previous = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, old in zip(loggers, previous, strict=True):
            logger.setLevel(old)


# -- 4. the summary --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSummary:
    task: str
    jobs: int
    succeeded: int
    failed: int
    retried: int
    attempts: int


def task_summaries() -> list[TaskSummary]:
    rows = (
        Job.objects.values("task_path")
        .annotate(
            jobs=Count("id"),
            succeeded=Count("id", filter=Q(status=JobStatus.SUCCEEDED)),
            failed=Count("id", filter=Q(status__in=[JobStatus.FAILED, JobStatus.CANCELLED])),
            retried=Count("id", filter=Q(attempts__gt=1)),
            total_attempts=Sum("attempts"),
        )
        .order_by("task_path")
    )
    return [
        TaskSummary(
            task=row["task_path"].rsplit(".", 1)[-1],
            jobs=row["jobs"],
            succeeded=row["succeeded"],
            failed=row["failed"],
            retried=row["retried"],
            attempts=row["total_attempts"] or 0,
        )
        for row in rows
    ]


def summary_table(summaries: list[TaskSummary]) -> list[str]:
    header = ("task", "jobs", "succeeded", "failed", "retried", "attempts")
    rows = [(s.task, s.jobs, s.succeeded, s.failed, s.retried, s.attempts) for s in summaries]
    rows.append(
        (
            "all",
            *(sum(getattr(s, name) for s in summaries) for name in header[1:]),
        )
    )
    width = max(len(str(row[0])) for row in [header, *rows])
    lines = [f"{header[0]:<{width}}" + "".join(f"{name:>11}" for name in header[1:])]
    lines.append("-" * len(lines[0]))
    for position, row in enumerate(rows):
        if position == len(rows) - 1:
            lines.append("-" * len(lines[0]))
        lines.append(f"{row[0]:<{width}}" + "".join(f"{value:>11}" for value in row[1:]))
    return lines


def last_error_line(job: Job) -> str:
    if not job.errors:
        return "no error recorded"
    lines = job.errors[-1].get("traceback", "").strip().splitlines()
    return lines[-1] if lines else "no traceback recorded"


def example_errors(limit: int = 3) -> list[str]:
    """Errors of failed jobs, one task after another so each task gets shown."""
    failed = Job.objects.filter(status=JobStatus.FAILED).order_by("task_path", "id")
    by_task: dict[str, list[Job]] = {}
    for job in failed:
        by_task.setdefault(job.task_path, []).append(job)
    picked: list[Job] = []
    while len(picked) < limit and any(by_task.values()):
        for jobs in by_task.values():
            if jobs and len(picked) < limit:
                picked.append(jobs.pop(0))
    return [
        f"#{job.pk} {job.task_path.rsplit('.', 1)[-1]} after {job.attempts} attempts: "
        f"{last_error_line(job)}"
        for job in picked
    ]


def webhook_summary() -> list[str]:
    deliveries = Delivery.objects.aggregate(
        total=Count("id"),
        succeeded=Count("id", filter=Q(status=DeliveryStatus.SUCCEEDED)),
        failed=Count("id", filter=Q(status=DeliveryStatus.FAILED)),
    )
    attempts = Attempt.objects.count()
    lines = [
        f"Webhooks: {Message.objects.count()} messages, {deliveries['total']} deliveries "
        f"({deliveries['succeeded']} succeeded, {deliveries['failed']} failed) in "
        f"{attempts} attempts; the receiver failed the first {RECEIVER_FAILS_FIRST} "
        "requests of each."
    ]
    first = Delivery.objects.order_by("pk").first()
    if first is not None:
        lines.append(f"The attempt log of delivery #{first.pk} to {first.endpoint.url}:")
        for attempt in Attempt.objects.filter(delivery=first).order_by("number"):
            answer = f"HTTP {attempt.status_code}" if attempt.status_code else attempt.error_class
            lines.append(
                f"  attempt {attempt.number} at {attempt.started_at:%H:%M:%S.%f}"[:-3]
                + f": {answer} in {attempt.duration * 1000:.1f} ms"
            )
    return lines


# -- 5. the admin ----------------------------------------------------------------------


def ensure_superuser(username: str = "admin", password: str = "admin") -> str:
    """Make ``username`` a superuser with ``password``; returns what was done."""
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    if user is None:
        user_model.objects.create_superuser(username, f"{username}@example.com", password)
        return "created"
    changed = not (user.is_superuser and user.is_staff and user.is_active)
    changed |= not user.check_password(password)
    if changed:
        user.is_superuser = user.is_staff = user.is_active = True
        user.set_password(password)
        user.save()
        return "updated"
    return "already there"


# -- the command -----------------------------------------------------------------------


class Command(BaseCommand):
    help = (
        "Demo: enqueue jobs through the shop's views, run the worker until they finish, "
        "summarise, then serve the admin on 127.0.0.1:8000."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-serve", action="store_true", help="Exit after the summary; do not serve."
        )
        parser.add_argument(
            "--customers", type=positive_int, default=200, help="Sign-ups (default 200)."
        )
        parser.add_argument(
            "--orders", type=non_negative_int, default=150, help="Orders (default 150)."
        )
        parser.add_argument(
            "--seed", type=int, default=None, help="Seed for the order amounts (default: random)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        rng = random.Random(options["seed"])
        self.step_clear()
        server = receiver.start(fail_first=RECEIVER_FAILS_FIRST)
        try:
            with demo_retry_schedule():
                self.step_endpoints(server.url)
                self.step_enqueue(options["customers"], options["orders"], rng)
                elapsed = self.step_drain()
        finally:
            server.stop()
        self.step_summary(elapsed)
        self.step_admin(serve=not options["no_serve"])

    def step_endpoints(self, url: str) -> None:
        orders = webhooks.create_endpoint(
            f"{url}/orders", event_types=["order.*"], description="the demo's order feed"
        )
        everything = webhooks.create_endpoint(f"{url}/all", description="every event")
        self.say(
            f"Webhook endpoints on a local receiver: {orders.url} (order.*) and "
            f"{everything.url} (every event); secrets like {orders.secret[:10]}..."
        )

    def say(self, text: str = "") -> None:
        self.stdout.write(text)

    def step_clear(self) -> None:
        deleted = clear_demo_data()
        listed = ", ".join(f"{count:,} {name}" for name, count in deleted.items())
        self.say(f"Clean slate: deleted {listed or 'nothing'}.")

    def step_enqueue(self, customers: int, orders: int, rng: random.Random) -> None:
        client = Client()
        started = time.monotonic()
        emails = sign_up(client, customers)
        over_900 = place_orders(client, emails, orders, rng)
        seconds = time.monotonic() - started
        self.say(
            f"Enqueued through the views in {seconds:.1f} s: {customers} x POST /signup/ "
            f"(send_welcome), {orders} x POST /orders/ (render_invoice; {over_900} over 900 "
            f"will fail). Jobs queued: {Job.objects.count()}."
        )
        self.say("Transactional enqueue:")
        self.say(f"  {conflicting_signup(client, emails[0])}")
        self.say(f"  {rolled_back_signup(client)}")

    def step_drain(self) -> float:
        """Run the worker until every job has finished; returns the seconds it took."""
        queues = sorted(task_backends["default"].queues)
        drain = Drain(queues=queues)
        thread = threading.Thread(target=drain.run, name="demo-worker", daemon=True)
        self.say(
            f"Running the worker (queues {', '.join(queues)}; {CONCURRENCY} threads, burst "
            "rounds until every job has finished):"
        )
        started = time.monotonic()
        with quiet_loggers(*WORKER_LOGGERS):
            thread.start()
            try:
                self.show_progress(thread, started)
            except KeyboardInterrupt:
                drain.stop()
                thread.join()
                self.say("")
                raise CommandError("Interrupted; unfinished jobs stay queued.") from None
            thread.join()
        elapsed = time.monotonic() - started
        if drain.error is not None:
            raise CommandError(f"The worker failed: {drain.error!r}") from drain.error
        self.say(f"Worker rounds: {len(drain.rounds)}.")
        return elapsed

    def show_progress(self, thread: threading.Thread, started: float) -> None:
        tty = self.stdout.isatty()
        last_plain = -PLAIN_LINE_SECONDS
        while True:
            alive = thread.is_alive()  # read before the counts, so the last line is final
            elapsed = time.monotonic() - started
            line = Progress.read().line(elapsed)
            if tty:
                self.stdout.write(f"\r{line}\x1b[K", ending="")
                self.stdout.flush()
            elif not alive or elapsed - last_plain >= PLAIN_LINE_SECONDS:
                self.say(line)
                last_plain = elapsed
            if not alive:
                break
            thread.join(POLL_SECONDS)
        if tty:
            self.say("")

    def step_summary(self, elapsed: float) -> None:
        summaries = task_summaries()
        self.say("")
        for line in webhook_summary():
            self.say(line)
        finished = sum(s.succeeded + s.failed for s in summaries)
        self.say("")
        for line in summary_table(summaries):
            self.say(line)
        self.say(
            f"{finished} jobs finished in {elapsed:.1f} s: "
            f"{finished / elapsed if elapsed else 0:.0f} jobs/s "
            f"({sum(s.attempts for s in summaries)} attempts)."
        )
        errors = example_errors()
        if errors:
            self.say("Example errors of failed jobs:")
            for error in errors:
                self.say(f"  {error}")

    def step_admin(self, serve: bool) -> None:
        done = ensure_superuser()
        self.say("")
        self.say(f"Superuser admin (password admin): {done}.")
        if not serve:
            return
        self.say(f"Dashboard: {DASHBOARD_URL}  (log in as admin / admin; Ctrl-C to stop)")
        call_command("runserver", "127.0.0.1:8000", use_reloader=False)
