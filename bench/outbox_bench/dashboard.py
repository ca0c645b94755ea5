"""The dashboard benchmark: the admin's pages rendered over a large history.

It writes ``jobs`` finished, failed and queued jobs spread over the last ``days`` days and
``attempts`` webhook attempts (two per delivery, with the endpoints' hourly counts the
recorder would have kept) over the last day, straight in SQL (a million ORM saves would
take longer than the benchmark; each database's spelling is in ``dashboard_sql``), then
renders the dashboard and the admin's lists as a logged-in superuser would, and reports
milliseconds per page and queries per page; then times retention's ``prune()`` of the
oldest day's finished jobs, so that pruning at a size is measured beside the pages. Every
row it writes carries its mark and is deleted at the end.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from django_outbox import retention
from django_outbox.models import Attempt, Delivery, Endpoint, EndpointHour, Job, Message
from outbox_bench.dashboard_sql import spelling

MARK = "outbox-bench-dashboard"
ENDPOINTS = 50
PAGES = {
    "dashboard": "/admin/django_outbox/dashboard/",
    "dashboard refresh": "/admin/django_outbox/dashboard/?partial=1",
    "job list": "/admin/django_outbox/job/",
    "failed jobs": "/admin/django_outbox/job/?status__exact=failed",
    "attempt list": "/admin/django_outbox/attempt/",
    "delivery list": "/admin/django_outbox/delivery/",
}
#: A failed job's errors: JSON text, in which ``\n`` is JSON's own escape (the SQL literal
#: keeps the backslash).
FAILED_ERRORS = """[{"exception_class_path": "builtins.ValueError",
                    "traceback": "Traceback\\nValueError: bench"}]"""


@dataclass(frozen=True, slots=True)
class PageTime:
    page: str
    median_ms: float
    max_ms: float
    queries: int


def fill(
    jobs: int, attempts: int, days: int, queued: int | None = None, failed: int | None = None
) -> float:
    """Write the history; returns the seconds it took. ``queued`` and ``failed``: about
    how many jobs of ``jobs`` are queued and failed (1 % and 2 % unless given), the rest
    succeeded."""
    started = time.perf_counter()
    span = days * 86400
    # Every how many rows one is queued, and one failed (the first by number, after it).
    queued_every = max(1, jobs // queued) if queued else 100
    failed_every = max(1, jobs // failed) if failed else 50
    deliveries = max(1, attempts // 2)
    messages = max(1, deliveries // ENDPOINTS)
    sql = spelling(connection)
    job, message, endpoint = Job._meta.db_table, Message._meta.db_table, Endpoint._meta.db_table
    delivery, attempt = Delivery._meta.db_table, Attempt._meta.db_table
    # Every number below is ours: the statements take no parameters, so % is plain SQL.
    is_queued = f"n % {queued_every} = 0"
    is_failed = f"n % {failed_every} = {1 % failed_every} AND NOT ({is_queued})"
    with connection.cursor() as cursor:
        # Jobs over `days`, the oldest first by id as in a table that has run for that long
        # (where the oldest finished rows, which pruning deletes, are in the first pages).
        at = f"{span} - {sql.quotient(f'n * {span}', str(jobs))}"
        # Half the queued jobs are due, half scheduled two hours ahead.
        due_at = f"{at} + 2 - CASE WHEN n % {2 * queued_every} = 0 THEN 7200 ELSE 0 END"
        cursor.execute(
            f"""INSERT INTO {job} (backend, queue, task_path, args, kwargs, priority, status,
                run_at, attempts, max_attempts, backoff_base, backoff_cap, worker_ids, errors,
                enqueued_at, started_at, last_attempted_at, finished_at, token)
            SELECT 'default', CASE WHEN n % 10 = 0 THEN 'reports' ELSE 'default' END,
                '{MARK}', '[]', '{{}}', 0,
                CASE WHEN {is_queued} THEN 'queued' WHEN {is_failed} THEN 'failed'
                     ELSE 'succeeded' END,
                {sql.ago(due_at)}, 1, 3, 1, 3600, '[]',
                CASE WHEN {is_failed} THEN {sql.text(FAILED_ERRORS)} ELSE '[]' END{sql.json},
                {sql.ago(f"{at} + 2")}, {sql.ago(f"{at} + 1")}, {sql.ago(f"{at} + 1")},
                CASE WHEN {is_queued} THEN NULL ELSE {sql.ago(at)} END,
                1 + n % 2147483646
            FROM {sql.series(jobs)}"""
        )
        cursor.execute(
            f"""INSERT INTO {endpoint} (url, tenant, description, event_types, secret,
                previous_secret, active, disabled_reason, consecutive_failures, created_at)
            SELECT {sql.concat("'https://hooks'", "n", "'.example.com/in'")}, '{MARK}', '', '[]',
                'whsec_bench', '', (n % 10 <> 0), '', 0, {sql.ago("0")}
            FROM {sql.series(ENDPOINTS)}"""
        )
        uid = sql.concat(f"'{MARK}-'", "n")
        cursor.execute(
            f"""INSERT INTO {message} (uid, event_type, tenant, body, created_at)
            SELECT {uid}, 'bench.event', '{MARK}', '{{}}', {sql.ago("n % 86000")}
            FROM {sql.series(messages)}"""
        )
        cursor.execute(
            f"""INSERT INTO {delivery} (message_id, endpoint_id, status, attempts, created_at)
            SELECT m.id, e.id, 'succeeded', 2, m.created_at
            FROM {message} m, {endpoint} e
            WHERE m.tenant = '{MARK}' AND e.tenant = '{MARK}'"""
        )
        for number, succeeded, code in (
            (1, "d.id % 7 <> 0", "CASE WHEN d.id % 7 = 0 THEN 500 ELSE 200 END"),
            (2, sql.true, "200"),
        ):
            cursor.execute(
                f"""INSERT INTO {attempt} (delivery_id, number, started_at, duration,
                    succeeded, status_code, response_headers, response_body, error_class,
                    error_message)
                SELECT d.id, {number}, d.created_at, 0.05, {succeeded}, {code}, '{{}}', '',
                    '', ''
                FROM {delivery} d JOIN {endpoint} e ON e.id = d.endpoint_id
                WHERE e.tenant = '{MARK}'"""
            )
        # What the recorder would have counted for those attempts.
        cursor.execute(
            f"""INSERT INTO {EndpointHour._meta.db_table} (endpoint_id, hour, attempts,
                succeeded)
            SELECT d.endpoint_id, {sql.hour("a.started_at")}, COUNT(*),
                SUM(CASE WHEN a.succeeded THEN 1 ELSE 0 END)
            FROM {attempt} a JOIN {delivery} d ON d.id = a.delivery_id
                JOIN {endpoint} e ON e.id = d.endpoint_id
            WHERE e.tenant = '{MARK}'
            GROUP BY 1, 2"""
        )
        tables = [
            m._meta.db_table for m in (Job, Message, Endpoint, Delivery, Attempt, EndpointHour)
        ]
        cursor.execute(sql.analyze(tables))
    return time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class PruneTime:
    jobs: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0


def time_prune(days: int) -> PruneTime:
    """``prune()`` of the jobs finished more than ``days - 1`` days ago: the oldest day of
    the history, about ``1 / days`` of it."""
    began = time.perf_counter()
    pruned = retention.prune(older_than=timedelta(days=days - 1))
    return PruneTime(pruned.counts["jobs"], time.perf_counter() - began)


def clean() -> None:
    """Delete what fill() wrote (in SQL: the ORM would first read a million rows)."""
    endpoints = f"SELECT id FROM {Endpoint._meta.db_table} WHERE tenant = '{MARK}'"
    deliveries = f"SELECT id FROM {Delivery._meta.db_table} WHERE endpoint_id IN ({endpoints})"
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Attempt._meta.db_table} WHERE delivery_id IN ({deliveries})")
        cursor.execute(
            f"DELETE FROM {EndpointHour._meta.db_table} WHERE endpoint_id IN ({endpoints})"
        )
        cursor.execute(f"DELETE FROM {Delivery._meta.db_table} WHERE endpoint_id IN ({endpoints})")
        cursor.execute(f"DELETE FROM {Message._meta.db_table} WHERE tenant = '{MARK}'")
        cursor.execute(f"DELETE FROM {Endpoint._meta.db_table} WHERE tenant = '{MARK}'")
        cursor.execute(f"DELETE FROM {Job._meta.db_table} WHERE task_path = '{MARK}'")


def time_pages(rounds: int) -> list[PageTime]:
    user, _ = User.objects.get_or_create(
        username=MARK, defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    results = []
    try:
        with override_settings(DEBUG=False):
            for name, url in PAGES.items():
                client.get(url)  # warm: templates, caches
                times = []
                for _ in range(rounds):
                    with CaptureQueriesContext(connection) as queries:
                        began = time.perf_counter()
                        response = client.get(url)
                        times.append((time.perf_counter() - began) * 1000)
                    if response.status_code != 200:
                        raise RuntimeError(f"{url} answered {response.status_code}")
                results.append(PageTime(name, statistics.median(times), max(times), len(queries)))
    finally:
        user.delete()
    return results
