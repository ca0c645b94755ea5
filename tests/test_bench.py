"""A small run of each benchmark, so the suite notices when one stops working."""

import json
import re

import django
import pytest
from django.core.management import call_command

from django_outbox.models import Job, Workflow

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # The benchmarks' own tests run in one CI row, on every database: the Django 5.2 row,
    # which has the room (the 6.1 row runs the multi-process keys tests, Schemathesis,
    # wake-ups and pickup alone; CI must stay under 25 minutes).
    pytest.mark.skipif(django.VERSION >= (6, 0), reason="run in the Django 5.2 row only"),
]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_drain_runs_every_job_and_prints_its_figures(capsys, processes):
    call_command(
        "outbox_bench", "drain", "--jobs", "300", "--processes", processes, "--concurrency", "2"
    )
    out = capsys.readouterr().out
    assert re.search(r"succeeded\s+300 of 300", out)
    assert re.search(r"worker peak RSS\s+\d+ MB", out)
    assert f"{processes} processes x 2 threads" in out
    per_job = float(out.split("statements per job")[1].split()[0])
    assert 0 < per_job < 1
    assert not Job.objects.exists()  # the benchmark cleans up after itself


def test_drain_with_peers_measures_the_raw_sql_ceiling_in_the_same_shape(capsys, tmp_path):
    from django.db import connection

    call_command(
        "outbox_bench", "drain", "--jobs", "300", "--processes", "2", "--concurrency", "2",
        "--peers", "--rounds", "2", "--json", str(tmp_path / "drain.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = json.loads((tmp_path / "drain.json").read_text())["figures"]
    # Two rounds: each one's rate, and the best one's figures.
    each = next(line for line in out.splitlines() if "drain, each round" in line)
    rates = [float(x.replace(",", "")) for x in each.split("round", 1)[1].split(", ")]
    # The table rounds to whole jobs per second.
    assert rates == pytest.approx(figures["drain_rounds"], abs=0.5) and len(rates) == 2
    best = next(line for line in out.splitlines() if "drain (best round)" in line)
    assert f"{max(rates):,.0f} jobs/s" in best
    ceiling = next(line for line in out.splitlines() if "raw-SQL ceiling" in line)
    if connection.vendor not in ("postgresql", "mysql"):
        assert f"not measured: PostgreSQL and MariaDB only, not {connection.vendor}" in ceiling
        return
    ratios = next(line for line in out.splitlines() if "ours / ceiling, each round" in line)
    assert len(figures["ceiling"]["round_ratios"]) == 2
    assert f"(median {figures['ceiling']['median_round_ratio']:.0%})" in ratios
    assert "300 succeeded" in ceiling
    per_job = float(ceiling.split("succeeded; ")[1].split()[0])
    ratio = next(line for line in out.splitlines() if "django_outbox / ceiling" in line)
    assert ratio.strip().endswith("% of its drain rate")
    claim = next(line for line in out.splitlines() if "raw-SQL ceiling's claim" in line)
    if connection.vendor == "postgresql":
        # 2 x 2 threads claim batches of 50: a claim and a completion per batch, and one
        # empty claim per thread at the end; more batches when claims meet (as below).
        assert 0.04 <= per_job <= 40 / 300
        assert "RETURNING id" in claim
        wal = next(line for line in out.splitlines() if "WAL: django_outbox / ceiling" in line)
        assert float(wal.split()[-1].rstrip("x")) > 0
    else:
        # MariaDB: the SELECT … SKIP LOCKED and the UPDATE of a claim, and the completion,
        # per batch (a claim a deadlock rolled back runs again); an empty claim per thread.
        assert per_job == round(figures["ceiling"]["statements_per_job"], 3)
        assert (3 * 6 + 4) / 300 <= figures["ceiling"]["statements_per_job"] <= 40 / 300
        assert "FOR UPDATE SKIP LOCKED, then one UPDATE of the ids" in claim
        assert "READ COMMITTED" in claim
        # No WAL: MariaDB counts its redo log for the whole server only.
        assert "WAL" not in ceiling and "WAL: django_outbox / ceiling" not in out
        assert figures["ceiling"]["wal_bytes_per_job"] is None
    # the ceiling's table is gone after the run
    assert "outbox_bench_ceiling" not in connection.introspection.table_names()


def test_latency_and_idle_run_and_print_a_row_per_mode(capsys):
    call_command(
        "outbox_bench", "latency", "--in-process", "--jobs", "10", "--gap-ms", "10",
        "--modes", "poll",
    )  # fmt: skip
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("poll"))
    p50, p95, p99, worst = (float(x) for x in row.split()[1:])
    assert 0 < p50 <= p95 <= p99 <= worst < 5000
    call_command("outbox_bench", "idle", "--workers", "1", "--seconds", "1", "--modes", "poll")
    assert "statements/s per worker" in capsys.readouterr().out


def test_webhooks_delivers_everything_and_prints_each_part(capsys):
    from django_outbox.models import Delivery, Endpoint, Message

    call_command(
        "outbox_bench",
        "webhooks",
        "--deliveries", "40",
        "--fan-out", "4",
        "--processes", "1",
        "--concurrency", "4",
        "--retries", "20",
        "--sizes", "1,3",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "40 deliveries (4 endpoints per message)" in out
    assert "40 succeeded, 40 requests received" in out
    assert "20 deliveries failing once: 40 attempts, 20 retries" in out
    # The loads and lookups, counted from the statements the worker's threads ran: each
    # kind at least once, and fewer than one per attempt.
    loads = re.search(
        r"first attempts loaded in (\d+) batches \(no lookup\), "
        r"retries in (\d+) batches \((\d+) lookup queries\)",
        out,
    )
    assert loads is not None, out
    first, retry, lookups = map(int, loads.groups())
    assert 1 <= first <= 20 and 1 <= retry <= lookups <= 20, loads.group()
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [(row[0], row[1]) for row in rows] == [("1", "5.0"), ("3", "5.0")]
    # It cleans up after itself.
    assert not Message.objects.exists() and not Endpoint.objects.exists()
    assert not Delivery.objects.exists() and not Job.objects.exists()


def test_idle_refuses_a_bad_settle_before_starting_anything():
    from django.core.management.base import CommandError

    for bad, says in (("-1", "0 or more"), ("soon", "a number of seconds"), ("inf", "at most")):
        with pytest.raises(CommandError, match=says):
            call_command("outbox_bench", "idle", "--peers", "--settle", bad)
    assert not Job.objects.exists()


def test_dashboard_refuses_a_history_too_short_to_prune_before_writing_it():
    from django.core.management.base import CommandError

    for bad, says in (("1", "at least 2 days"), ("week", "a whole number of days")):
        with pytest.raises(CommandError, match=says):
            call_command("outbox_bench", "dashboard", "--jobs", "10", "--days", bad)
    with pytest.raises(CommandError, match=r"\(12 together\) are jobs of --jobs \(10\)"):
        call_command("outbox_bench", "dashboard", "--jobs", "10", "--queued", "4", "--failed", "8")
    assert not Job.objects.exists()


def test_dashboard_holds_the_queued_and_failed_jobs_it_is_given_whatever_the_history(
    monkeypatch,
):
    """So that a history of many finished jobs can be rendered beside the same active ones:
    the ids run from the oldest job to the newest, as in a table that ran for that long."""
    from django.db import connection
    from django.db.models import Count

    from outbox_bench import dashboard

    if connection.vendor == "mysql" and not connection.mysql_is_mariadb:
        pytest.skip("the dashboard's loader writes with MariaDB's sequence tables")
    written: dict = {}

    def count(rounds):
        jobs = Job.objects.filter(task_path=dashboard.MARK)
        written["statuses"] = dict(jobs.values_list("status").annotate(n=Count("id")))
        by_id = jobs.exclude(status="queued").order_by("id")
        written["finished in id order"] = list(by_id.values_list("finished_at", flat=True))
        return []

    monkeypatch.setattr(dashboard, "time_pages", count)
    call_command(
        "outbox_bench", "dashboard", "--jobs", "1000", "--queued", "10", "--failed", "4",
        "--attempts", "2", "--days", "3", "--rounds", "1",
    )  # fmt: skip
    assert written["statuses"] == {"queued": 10, "failed": 4, "succeeded": 986}
    finished = written["finished in id order"]
    assert finished == sorted(finished, reverse=False) and finished[0] < finished[-1]


def test_webhooks_refuses_bad_arguments():
    from django.core.management.base import CommandError

    for bad in (["--sizes", "1,x"], ["--sizes", "0"], ["--parts", "speed"]):
        with pytest.raises(CommandError):
            call_command("outbox_bench", "webhooks", *bad)


def test_retry_storm_finishes_every_job_under_both_backoffs(capsys):
    from django.db import connection

    call_command(
        "outbox_bench", "retry-storm", "--jobs", "20", "--hold-ms", "2", "--concurrency", "4"
    )
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    for name in ("full", "fixed"):
        succeeded, runs, median, worst, ratio = rows[name][2:]
        assert int(succeeded) == 20 and int(runs) >= 20
        assert 0 < float(median) <= float(worst)
        assert float(ratio) >= 1  # the slowest is never quicker than the median
    assert not Job.objects.exists()  # its jobs are gone, and its table
    assert "outbox_bench_storm" not in connection.introspection.table_names()


def test_dashboard_writes_its_history_renders_each_page_and_deletes_it(capsys, monkeypatch):
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.db import connection
    from django.db.models import Count, Sum
    from django.utils import timezone

    from django_outbox.models import Attempt, Delivery, Endpoint, EndpointHour, Message
    from outbox_bench import dashboard

    if connection.vendor == "mysql" and not connection.mysql_is_mariadb:
        pytest.skip("the dashboard's loader writes with MariaDB's sequence tables")
    written: dict = {}
    render = dashboard.time_pages

    def count_then_render(rounds):
        """What the loader wrote, counted just before the pages render it."""
        jobs = Job.objects.filter(task_path=dashboard.MARK)
        written["statuses"] = dict(jobs.values_list("status").annotate(n=Count("id")))
        written["reports"] = jobs.filter(queue="reports").count()
        written["oldest"] = timezone.now() - min(jobs.values_list("enqueued_at", flat=True))
        written["errors"] = jobs.filter(status="failed").first().errors
        written["endpoints"] = Endpoint.objects.filter(tenant=dashboard.MARK).count()
        written["active"] = Endpoint.objects.filter(tenant=dashboard.MARK, active=True).count()
        written["deliveries"] = sorted(Delivery.objects.values_list("id", flat=True))
        attempts = Attempt.objects.values_list("number", "succeeded").annotate(n=Count("id"))
        written["attempts"] = {(number, ok): n for number, ok, n in attempts}
        written["hours"] = EndpointHour.objects.aggregate(a=Sum("attempts"), ok=Sum("succeeded"))
        return render(rounds)

    prune = dashboard.time_prune

    def count_around_prune(days):
        jobs = Job.objects.filter(task_path=dashboard.MARK)
        written["before prune"] = jobs.count()
        pruned = prune(days)
        written["after prune"] = list(jobs.values_list("status", "finished_at"))
        return pruned

    monkeypatch.setattr(dashboard, "time_pages", count_then_render)
    monkeypatch.setattr(dashboard, "time_prune", count_around_prune)
    call_command(
        "outbox_bench", "dashboard", "--jobs", "300", "--attempts", "200", "--days", "2",
        "--rounds", "2",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert f"outbox_bench dashboard, {connection.vendor}: 300 jobs over 2 days" in out
    for page in dashboard.PAGES:  # a row per page: median <= slowest, and its queries
        row = re.search(rf"^  {page}\s+([\d.]+)\s+([\d.]+)\s+(\d+)$", out, re.MULTILINE)
        assert row, f"no row for {page!r} in:\n{out}"
        assert 0 < float(row[1]) <= float(row[2]) and int(row[3]) > 0
    # The same history on every database: 1 % queued, 2 % failed, the rest succeeded, a
    # tenth in "reports", over the two days; 50 endpoints (a tenth off), a delivery to each
    # for each of 2 messages, two attempts each (the first failing where its id is a
    # multiple of 7), and the hourly counts of those attempts.
    assert written["statuses"] == {"queued": 3, "failed": 6, "succeeded": 291}
    assert written["reports"] == 30
    assert timedelta(days=1) < written["oldest"] < timedelta(days=2, minutes=1)
    assert written["errors"] == [
        {"exception_class_path": "builtins.ValueError", "traceback": "Traceback\nValueError: bench"}
    ]
    assert (written["endpoints"], written["active"], len(written["deliveries"])) == (50, 45, 100)
    failing = sum(1 for pk in written["deliveries"] if pk % 7 == 0)
    attempts = {(1, False): failing, (1, True): 100 - failing, (2, True): 100}
    assert written["attempts"] == {key: n for key, n in attempts.items() if n}
    assert written["hours"] == {"a": 200, "ok": 200 - failing}
    # Then the oldest of the two days' finished jobs are pruned, and only those.
    line = re.search(r"^  prune: (\d+) jobs finished over 1 days ago in [\d.]+ s", out, re.M)
    assert line, out
    kept = written["after prune"]
    assert int(line[1]) == written["before prune"] - len(kept) > 50, out
    day_ago = timezone.now() - timedelta(days=1, minutes=1)
    assert all(finished is None or finished > day_ago for _, finished in kept)
    assert sum(1 for status, _ in kept if status == "queued") == 3
    # Everything it wrote is gone, its superuser too.
    for model in (Job, Message, Endpoint, Delivery, Attempt, EndpointHour):
        assert not model.objects.exists(), model
    assert not User.objects.filter(username=dashboard.MARK).exists()


def test_json_writes_the_figures_the_table_shows(capsys, tmp_path):
    import json

    out_file = tmp_path / "drain.json"
    call_command(
        "outbox_bench", "drain", "--jobs", "200", "--processes", "1", "--concurrency", "2",
        "--json", str(out_file),
    )  # fmt: skip
    table = capsys.readouterr().out
    figures = json.loads(out_file.read_text())
    assert figures["workload"] == "drain"
    assert figures["options"]["jobs"] == 200 and figures["options"]["concurrency"] == 2
    drained = figures["figures"]["drain"]
    assert drained["succeeded"] == drained["jobs"] == 200
    assert f"{drained['drain_per_s']:,.0f} jobs/s" in table
    assert f"figures written to {out_file}" in table


def test_json_to_a_place_that_cannot_be_written_fails_before_the_run(tmp_path):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match=r"--json: cannot write .*missing/drain\.json"):
        call_command(
            "outbox_bench", "drain", "--jobs", "10", "--json", str(tmp_path / "missing/drain.json")
        )
    assert not Job.objects.exists()  # nothing was enqueued


def test_fanout_reports_constant_statements_per_send_and_per_queue_enqueues(capsys):
    # 32 jobs: one INSERT even where Django 5.2 caps an SQLite statement at 999 parameters
    # (a job row has 29 columns to write).
    call_command("outbox_bench", "fanout", "--sizes", "1,5", "--queues", "1,4", "--jobs", "32")
    lines = capsys.readouterr().out.splitlines()
    sends = {int(line.split()[0]): float(line.split()[1]) for line in lines[3:5]}
    assert sends[1] == sends[5]  # one send costs the same for 1 and 5 endpoints
    spreads = {int(line.split()[0]): float(line.split()[1]) for line in lines[7:9]}
    # A savepoint, an INSERT and a release per queue, within one transaction.
    assert spreads[4] - spreads[1] == 3 * 3
    assert not Job.objects.exists()


def test_plot_draws_a_png_of_the_workloads_figures(capsys, tmp_path):
    call_command(
        "outbox_bench", "retry-storm", "--jobs", "6", "--hold-ms", "1", "--concurrency", "2",
        "--plot", str(tmp_path),
    )  # fmt: skip
    chart = tmp_path / "retry-storm.png"
    assert f"chart drawn to {chart}" in capsys.readouterr().out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_to_a_place_that_is_not_a_directory_fails_before_the_run(tmp_path):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="is not a directory"):
        call_command("outbox_bench", "drain", "--jobs", "10", "--plot", str(tmp_path / "no"))
    assert not Job.objects.exists()


def _peer_figures(path):
    import json

    return {peer["peer"]: peer for peer in json.loads(path.read_text())["figures"]["peers"]}


def _peer_leftovers():
    """Schemas or Redis keys a peer left behind (there must be none)."""
    import redis
    from django.conf import settings
    from django.db import connection

    left = []
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'outbox_bench%%'")
            left += [row[0] for row in cursor.fetchall()]
    elif connection.vendor == "mysql":  # a peer's own database there
        with connection.cursor() as cursor:
            cursor.execute("SHOW DATABASES LIKE 'outbox\\_bench%%'")
            left += [row[0] for row in cursor.fetchall()]
    client = redis.Redis.from_url(settings.CACHES["redis"]["LOCATION"])
    return left + [key.decode() for key in client.scan_iter("outbox_bench_celery:*")]


def test_drain_with_peers_drains_the_same_shape_with_each_peer(capsys, tmp_path):
    from django.db import connection

    out_file = tmp_path / "drain.json"
    call_command(
        "outbox_bench", "drain", "--jobs", "200", "--processes", "1", "--concurrency", "2",
        # Enough jobs that each peer is still draining at the harness's first look (every
        # 50 ms), even on a loaded machine: Celery drained 60 before it once, in CI.
        "--peers", "--peer-jobs", "400", "--json", str(out_file),
    )  # fmt: skip
    out = capsys.readouterr().out
    peers = _peer_figures(out_file)
    assert set(peers) == {"django-tasks-db", "procrastinate", "pgqueuer", "celery"}
    vendor = connection.vendor
    postgres_peers = ("procrastinate", "pgqueuer")
    if vendor != "postgresql":
        for name in postgres_peers:
            assert peers[name]["missing"] == f"runs on PostgreSQL here, not {vendor}"
            assert re.search(rf"{name}\s+not measured: runs on PostgreSQL here, not {vendor}", out)
    if vendor not in ("postgresql", "mysql"):
        says = f"runs on PostgreSQL or MariaDB here, not {vendor}"
        assert peers["django-tasks-db"]["missing"] == says
        assert re.search(rf"django-tasks-db\s+not measured: {says}", out)
    measured = ["celery"]
    if vendor in ("postgresql", "mysql"):  # django-tasks-db runs on both
        measured.append("django-tasks-db")
    if vendor == "postgresql":
        measured += postgres_peers
    ours = json.loads(out_file.read_text())["figures"]["drain"]["drain_per_s"]
    for name in measured:
        peer = peers[name]
        assert peer.get("succeeded") == peer.get("jobs") == 400, out
        assert (peer["processes"], peer["threads"]) == (1, 2)
        assert peer["per_s"] > 0 and peer["enqueue_per_s"] > 0
        row = next(line for line in out.splitlines() if line.strip().startswith(name))
        assert f"{peer['per_s']:,.0f}" in row
        assert f"{ours / peer['per_s']:.1f}x" in row
        if name == "celery":  # Redis commands, not PostgreSQL's counts
            assert peer["redis_commands_per_job"] > 0 and peer["transactions_per_job"] is None
        elif vendor == "postgresql":  # every job costs each of these peers transactions
            # (PgQueuer's are of batches of 10) and some WAL
            least = 0.05 if name == "pgqueuer" else 1
            assert peer["transactions_per_job"] >= least and peer["wal_bytes_per_job"] > 0
        else:  # MariaDB counts both for the whole server only: not measured, and shown so
            assert peer["transactions_per_job"] is None and peer["wal_bytes_per_job"] is None
            assert peer["redis_commands_per_job"] is None
            assert row.split()[-3:] == ["-", "-", "-"], row
    fastest = max(measured, key=lambda name: peers[name]["per_s"])
    assert f"django_outbox / fastest peer ({fastest}): " in out
    assert _peer_leftovers() == []


def test_latency_and_idle_with_peers_print_a_row_per_peer(capsys, tmp_path):
    from django.db import connection

    call_command(
        "outbox_bench", "latency", "--in-process", "--jobs", "5", "--gap-ms", "20", "--modes",
        "poll", "--peers", "--json", str(tmp_path / "latency.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    vendor = connection.vendor
    measured = ["celery"]
    if vendor == "postgresql":
        measured += ["raw-SQL ceiling", "django-tasks-db", "procrastinate"]
    else:
        says = rf"PostgreSQL only, not {vendor} \(it waits on LISTEN/NOTIFY\)"
        assert re.search(rf"raw-SQL ceiling\s+not measured: {says}", out)
    if vendor == "mysql":
        measured.append("django-tasks-db")
    peers = _peer_figures(tmp_path / "latency.json")
    for name in measured:
        assert peers[name].get("jobs") == 5, out
        row = next(line for line in out.splitlines() if line.strip().startswith(name))
        p50, p95, p99, worst = (float(x) for x in re.findall(r"\d+\.\d", row))
        # django-tasks-db polls once a second: a pickup can take up to that, and no longer.
        assert 0 < p50 <= p95 <= p99 <= worst < 2000, out

    call_command(
        "outbox_bench", "idle", "--workers", "1", "--seconds", "2", "--modes", "poll", "--peers",
        "--settle", "1", "--json", str(tmp_path / "idle.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    peers = _peer_figures(tmp_path / "idle.json")
    if vendor == "mysql":  # its idle cost would be the server's transactions for its database
        measured.remove("django-tasks-db")
        says = "MariaDB counts transactions for the whole server only, not per database"
        assert peers["django-tasks-db"]["missing"] == says
        assert re.search(rf"django-tasks-db\s+not measured: {says}", out)
    for name in measured:
        assert peers[name].get("workers") == 1, out
        assert peers[name]["unit"] == ("Redis commands" if name == "celery" else "transactions")
        assert peers[name]["per_worker_s"] >= 0
        assert re.search(rf"{name}\s+-\s+", out)
    if connection.vendor == "postgresql":
        # django-tasks-db looks for work every second when idle: it is never free.
        assert peers["django-tasks-db"]["per_worker_s"] >= 0.5, out
        row = next(line for line in out.splitlines() if line.startswith("  raw-SQL ceiling"))
        assert float(row.split()[3]) == pytest.approx(
            peers["raw-SQL ceiling"]["per_worker_s"], abs=1e-3
        )
    assert _peer_leftovers() == []


def test_a_peer_process_that_fails_is_reported_with_its_output():
    from outbox_bench.peers.base import Children, PeerError, clock_drain

    with Children("outbox_bench.peers.no_such_module", {}) as children:
        children.start("worker")
        with pytest.raises(PeerError, match=r"(?s)worker failed:.*No module named"):
            clock_drain(lambda: 0, 10, children)
        with pytest.raises(PeerError, match=r"(?s)setup failed:.*No module named"):
            children.run("setup")


def test_peer_jobs_must_be_a_positive_number():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--peer-jobs"):
        call_command("outbox_bench", "drain", "--peers", "--peer-jobs", "0")
    assert not Job.objects.exists()


# -- latency and limited: runworker processes started as a user starts them ------------------
#
# Small runs: they check that the workers are started and stopped, that the figures are
# there and add up, and that bad options are refused; never how fast anything is.


def _bench_json(path):
    return json.loads(path.read_text())["figures"]


def _gone(pid):
    """Whether process ``pid`` has exited (and was reaped)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _shim_checkout(directory):
    """A "checkout" whose manage.py runs this project's, and notes each start."""
    from tests.conftest import ROOT

    (directory / "manage.py").write_text(
        "import os, runpy, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"with open({str(directory / 'started')!r}, 'a') as log:\n"
        "    log.write(f'{os.getpid()} {os.getcwd()}\\n')\n"
        f"runpy.run_path({str(ROOT / 'manage.py')!r}, run_name='__main__')\n"
    )
    return directory


def test_latency_starts_runworker_processes_for_each_pattern_and_stops_them(capsys, tmp_path):
    from tests.conftest import ROOT

    checkout = _shim_checkout(tmp_path)
    out_file = tmp_path / "latency.json"
    call_command(
        "outbox_bench", "latency", "--jobs", "6", "--gap-ms", "20", "--wake", "poll",
        "--concurrency", "1,2", "--settle", "0.2", "--worker-dir", str(checkout),
        "--enqueuer-dir", str(ROOT),
        "--json", str(out_file),
    )  # fmt: skip
    out = capsys.readouterr().out
    rows = _bench_json(out_file)["modes"]
    assert [(r["wake"], r["concurrency"], r["enqueue"]) for r in rows] == [
        ("poll", 1, "autocommit"),
        ("poll", 2, "autocommit"),
    ]
    for row in rows:
        assert row["system"] == "django_outbox"
        assert (row["ran"], row["not_run"], row["jobs"]) == (6, 0, 6), out
        assert 0 <= row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"] <= row["max_ms"]
        assert 0 <= row["over_1s"] <= 6
        # One runworker process per row, started from the checkout given, as a user starts
        # it, that said which wake-ups it uses and exited on SIGTERM.
        assert row["worker_dir"] == str(checkout)
        assert row["worker_argv"][:3] == ["manage.py", "runworker", "--concurrency"]
        assert row["worker_argv"][3] == str(row["concurrency"])
        assert row["worker_wakes"] == ["poll"] and row["worker_exit_codes"] == [0]
        (pid,) = row["worker_pids"]
        assert _gone(pid)
        assert f"runworker pid {pid}: started (wake-ups: poll), stopped by SIGTERM, exit 0" in out
        line = next(
            line
            for line in out.splitlines()
            if re.match(rf"  poll\s+1x{row['concurrency']} ", line)
        )
        cells = line.split()
        assert [float(x) for x in cells[3:7]] == [
            pytest.approx(row[k], abs=0.06) for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")
        ]
        assert (int(cells[7]), int(cells[8])) == (row["over_1s"], 0)
    started = (checkout / "started").read_text().splitlines()
    assert sorted(int(line.split()[0]) for line in started) == sorted(
        pid for row in rows for pid in row["worker_pids"]
    )
    assert all(line.split()[1] == str(checkout) for line in started)
    assert not Job.objects.exists()  # the benchmark cleans up after itself


def test_latency_bursts_in_transactions_with_redis_wake_ups_and_the_ceiling(capsys, tmp_path):
    from django.db import connection

    out_file = tmp_path / "latency.json"
    call_command(
        "outbox_bench", "latency", "--jobs", "6", "--burst", "3", "--gap-ms", "100",
        "--in-transaction", "--wake", "redis", "--settle", "0.2", "--ceiling",
        "--json", str(out_file),
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "6 jobs per row, bursts of 3 every 100 ms" in out
    figures = _bench_json(out_file)
    ours = [row for row in figures["modes"] if row["system"] == "django_outbox"]
    assert [(r["wake"], r["enqueue"], r["burst"]) for r in ours] == [("redis", "atomic", 3)]
    assert (ours[0]["ran"], ours[0]["not_run"]) == (6, 0), out
    assert ours[0]["worker_wakes"] == ["redis"] and ours[0]["worker_exit_codes"] == [0]
    assert ours[0]["worker_dir"] == ours[0]["enqueuer_dir"]  # this checkout, both
    assert re.search(r"  redis\s+1x1\s+atomic\s+[\d.]+", out)
    if connection.vendor != "postgresql":  # the pickup ceiling waits on LISTEN/NOTIFY
        says = rf"PostgreSQL only, not {connection.vendor} \(it waits on LISTEN/NOTIFY\)"
        assert re.search(rf"raw-SQL ceiling\s+not measured: {says}", out)
        return
    (ceiling,) = [row for row in figures["modes"] if row["system"] == "raw-SQL ceiling"]
    assert (ceiling["ran"], ceiling["not_run"], ceiling["enqueue"]) == (6, 0, "atomic")
    (ratio,) = figures["ceiling_ratios"]
    assert ratio["p50"] == pytest.approx(ours[0]["p50_ms"] / ceiling["p50_ms"])
    assert f"redis / ceiling: p50 {ratio['p50']:.1f}x, p99 {ratio['p99']:.1f}x" in out
    with connection.cursor() as cursor:  # the ceiling's table is gone after the run
        cursor.execute("SELECT to_regclass('outbox_bench_pickup_ceiling')")
        assert cursor.fetchone()[0] is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--burst", "0"], "--burst: must be at least 1"),
        (["--concurrency", "1,x"], "--concurrency: a comma-separated list of thread counts"),
        (["--concurrency", "0"], "--concurrency: thread counts must be at least 1"),
        (["--enqueue", "later"], "--enqueue: how jobs are enqueued: autocommit or atomic"),
        (["--gap-ms", "-5"], "--gap-ms: must be 0 or more"),
        (["--deadline", "0"], "--deadline: must be a number of seconds above 0"),
        (["--settle", "soon"], "--settle: expected a number of seconds"),
        (["--worker-dir", "/nonexistent"], "--worker-dir: /nonexistent has no manage.py"),
        (["--wake", "carrier-pigeon"], "wake mode.s. carrier-pigeon not available here"),
        (
            ["--in-process", "--burst", "5"],
            "--in-process measures the earlier pattern only.*--burst",
        ),
        (
            ["--in-process", "--concurrency", "4", "--in-transaction"],
            "--concurrency, --in-transaction measure runworker processes",
        ),
    ],
)
def test_latency_refuses_bad_options_before_starting_anything(args, says):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=says):
        call_command("outbox_bench", "latency", *args)
    assert not Job.objects.exists()


def test_limited_drains_a_limited_queue_with_runworker_processes(capsys, tmp_path, monkeypatch):
    # Not what users run (30 s): a freed place that waits for a stalled check waits 1 s here.
    monkeypatch.setenv("OUTBOX_TEST_STALLED_CHECK_SECONDS", "1")
    out_file = tmp_path / "limited.json"
    call_command(
        "outbox_bench", "limited", "--jobs", "4", "--job-seconds", "0.1", "--workers", "2",
        "--concurrency", "2", "--settle", "0.2", "--json", str(out_file),
    )  # fmt: skip
    out = capsys.readouterr().out
    f = _bench_json(out_file)["limited"]
    assert (f["ran"], f["not_run"], f["limit"], f["queue"]) == (4, 0, 1, "reports"), out
    # Two workers of two threads: only the limit, which reached them through
    # OUTBOX["QUEUES"], kept the runs one at a time.
    assert f["max_running"] == 1
    assert "most running at once  1 (limit 1)" in out
    assert f["gaps"] == 3 and 0 <= f["gap_p50_ms"] <= f["gap_p99_ms"] <= f["gap_max_ms"]
    assert f["ideal_seconds"] == pytest.approx(0.4)
    assert f["drain_seconds"] >= 0.4 and f["ratio"] == pytest.approx(0.4 / f["drain_seconds"])
    assert f"{f['ratio']:.0%} of it (target 90%)" in out
    assert len(f["worker_pids"]) == 2 and f["worker_exit_codes"] == [0, 0]
    assert all(_gone(pid) for pid in f["worker_pids"])
    assert "manage.py runworker --concurrency 2 --queues reports" in out
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--limit", "0"], "--limit: must be at least 1"),
        (["--job-seconds", "0"], "--job-seconds: must be a number of seconds above 0"),
        (["--job-seconds", "61"], "--job-seconds: must be at most 60 seconds"),
        (["--wake", "poll,redis"], "limited takes one wake mode, not poll, redis"),
        (["--plot", "charts"], "unrecognized arguments: --plot"),
    ],
)
def test_limited_refuses_bad_options_before_starting_anything(args, says):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=says):
        call_command("outbox_bench", "limited", *args)
    assert not Job.objects.exists()


# -- drain: runworker processes, the lean ceiling, PgQueuer, the webhooks' HTTP ceiling -------
#
# Small runs, a few seconds each: the workers are started and stopped, the figures are there
# and add up, bad options are refused before anything starts; never how fast anything is.


@pytest.fixture(autouse=True)
def _runworker_uses_the_test_database(django_db_setup, monkeypatch):
    """``outbox_bench drain`` starts ``manage.py runworker`` with this process's environment,
    and tests.settings sends a worker subprocess to the test database by this variable (as
    conftest's start_worker does)."""
    from django.db import connection

    monkeypatch.setenv("OUTBOX_TEST_DB_NAME", str(connection.settings_dict["NAME"]))


def _drain_checkout(directory, exit_with=None):
    """A "checkout" whose manage.py notes its pid and arguments, then runs this project's
    (or, with ``exit_with``, fails with that status when asked to run workers)."""
    from tests.conftest import ROOT

    fail = (
        f"if 'runworker' in sys.argv: print('no workers today'); sys.exit({exit_with})\n"
        if exit_with is not None
        else ""
    )
    (directory / "manage.py").write_text(
        "import json, os, runpy, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"with open({str(directory / 'started')!r}, 'a') as log:\n"
        "    log.write(json.dumps([os.getpid(), sys.argv[1:]]) + '\\n')\n"
        f"{fail}"
        f"runpy.run_path({str(ROOT / 'manage.py')!r}, run_name='__main__')\n"
    )
    return directory


def _started(directory):
    lines = (directory / "started").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_drain_starts_runworker_processes_as_a_user_does_and_times_them_from_the_jobs(
    capsys, tmp_path
):
    checkout = _drain_checkout(tmp_path)
    call_command(
        "outbox_bench", "drain", "--jobs", "200", "--processes", "2", "--concurrency", "2",
        "--worker-dir", str(checkout), "--json", str(tmp_path / "drain.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = _bench_json(tmp_path / "drain.json")
    drained = figures["drain"]
    assert drained["workers"] == "runworker" and drained["worker_dir"] == str(checkout)
    assert drained["succeeded"] == drained["jobs"] == 200
    # From the first job's start to the last one's finish: within the workers' lifetime.
    assert 0 < drained["drain_seconds"] <= drained["wall_seconds"]
    assert drained["drain_per_s"] == pytest.approx(200 / drained["drain_seconds"])
    assert drained["worker_cpu_us_per_job"] > 0 and drained["peak_rss_mb"] > 0
    assert re.search(rf"workers\s+runworker processes from {re.escape(str(checkout))}", out)
    assert re.search(r"workers' django_outbox\s+\S+django_outbox", out)
    # Started as a user starts them: one runworker command of two processes (a drain this
    # small has no warm-up drain before it).
    runs = [(pid, argv) for pid, argv in _started(checkout)]
    assert [argv for _, argv in runs] == [
        ["runworker", "--burst", "--queues", "default", "--processes", "2", "--concurrency", "2"]
    ]
    assert all(_gone(pid) for pid, _ in runs)  # and they are gone
    assert not Job.objects.exists()


def test_drain_ceiling_alternates_with_the_raw_sql_ceiling_without_the_peers(capsys, tmp_path):
    from django.db import connection

    call_command(
        "outbox_bench", "drain", "--jobs", "200", "--processes", "1", "--concurrency", "2",
        "--ceiling", "--rounds", "2", "--json", str(tmp_path / "drain.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = _bench_json(tmp_path / "drain.json")
    assert "peers" not in figures and "peers," not in out
    if connection.vendor not in ("postgresql", "mysql"):
        says = f"PostgreSQL and MariaDB only, not {connection.vendor}"
        assert re.search(rf"raw-SQL ceiling\s+not measured: {says}", out)
        return
    ratios = figures["ceiling"]["round_ratios"]
    assert len(ratios) == 2 and figures["ceiling"]["median_round_ratio"] > 0
    assert "from its first claim to its last batch run; 200 succeeded" in out


@pytest.mark.parametrize("names", ["", "pgqueuer,rq", "Celery"])
def test_drain_refuses_unknown_peer_names(names):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--peer-names: peers are django-tasks-db, "):
        call_command("outbox_bench", "drain", "--peers", "--peer-names", names)
    assert not Job.objects.exists()


def test_drain_forked_forks_the_workers_from_this_process(tmp_path):
    # In a process of its own, as a user runs it: forked from this test process, the
    # workers would copy its threads' state (the live server's, for the browser tests).
    import os
    import subprocess
    import sys

    from django.db import connection

    from tests.conftest import ROOT

    ran = subprocess.run(
        [
            sys.executable, "-W", "always::DeprecationWarning", "manage.py", "outbox_bench",
            "drain", "--forked", "--jobs", "200",
            "--processes", "2", "--concurrency", "2", "--json", str(tmp_path / "drain.json"),
        ],
        cwd=ROOT,
        env=os.environ | {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "OUTBOX_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "use of fork() may lead to deadlocks" not in ran.stderr
    out = ran.stdout
    drained = _bench_json(tmp_path / "drain.json")["drain"]
    assert drained["workers"] == "forked" and drained["worker_dir"] is None
    assert drained["succeeded"] == 200 and drained["statements"] > 0
    assert 0 < drained["drain_seconds"] <= drained["wall_seconds"]
    assert "forked from this process (--forked)" in out and "workers' django_outbox" not in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--worker-dir", "/no/such/checkout"], "is not a directory"),
        (["--worker-dir", "{tmp}"], "has no manage.py"),
        (["--worker-dir", "{root}", "--forked"], "use one or the other"),
    ],
)
def test_drain_refuses_a_bad_worker_dir_before_starting_anything(tmp_path, args, says):
    from django.core.management.base import CommandError

    from tests.conftest import ROOT

    args = [arg.format(tmp=tmp_path, root=ROOT) for arg in args]
    with pytest.raises(CommandError, match=says):
        call_command("outbox_bench", "drain", "--jobs", "10", *args)
    assert not Job.objects.exists()


def test_drain_reports_runworker_failing_with_its_output_and_cleans_up(tmp_path):
    from django.core.management.base import CommandError

    checkout = _drain_checkout(tmp_path, exit_with=3)
    with pytest.raises(CommandError, match=r"(?s)exited with status 3.*no workers today"):
        call_command("outbox_bench", "drain", "--jobs", "50", "--worker-dir", str(checkout))
    assert not Job.objects.exists()  # the jobs it enqueued are gone


def test_the_raw_sql_ceiling_is_the_lean_row_and_times_its_own_drain():
    from django.db import connection

    from outbox_bench import ceiling, ceiling_mariadb

    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip("the raw-SQL ceiling is PostgreSQL's and MariaDB's")
    f = ceiling.drain(300, 2, 2)
    assert f.succeeded == f.jobs == 300 and (f.processes, f.threads, f.batch) == (2, 2, 50)
    assert f.per_s == pytest.approx(300 / f.seconds) and f.seconds > 0
    if connection.vendor == "postgresql":
        # A claim and a completion per batch of 50 (more batches when claims meet), and an
        # empty claim per thread at the end.
        assert (2 * 6 + 4) / 300 <= f.statements_per_job <= 40 / 300
        assert f.wal_bytes_per_job > 0
        create = ceiling._CREATE.split("(", 1)[1].split(");", 1)[0]
    else:
        # The claim's SELECT … SKIP LOCKED and UPDATE, and the completion, per batch.
        assert (3 * 6 + 4) / 300 <= f.statements_per_job <= 60 / 300
        assert f.wal_bytes_per_job is None
        assert ceiling_mariadb.LOCK.endswith(f"LIMIT {ceiling.BATCH} FOR UPDATE SKIP LOCKED")
        create = ceiling_mariadb.CREATE.split("(", 1)[1].rsplit(")", 1)[0]
    # The row: id, queue, status, priority and run_at for the claim order, a lease.
    lines = [line.split() for line in create.strip().splitlines()]
    names = [line[0] for line in lines if line[0] != "INDEX"]
    assert names == ["id", "queue", "status", "priority", "run_at", "lease_until"]
    assert "outbox_bench_ceiling" not in connection.introspection.table_names()  # dropped


def test_the_mariadb_ceiling_claims_in_read_committed_transactions():
    from django.db import connection

    from outbox_bench import mariadb

    if connection.vendor != "mysql":
        pytest.skip("MariaDB's ceiling")
    db = mariadb.connect(mariadb.plain_params(), autocommit=False)
    try:
        cursor = db.cursor()
        cursor.execute("SELECT @@tx_isolation, @@autocommit, DATABASE()")
        isolation, autocommit, database = cursor.fetchone()
    finally:
        db.close()
    assert (isolation, autocommit) == ("READ-COMMITTED", 0)
    assert database == connection.settings_dict["NAME"]  # the database Django uses


def test_pgqueuer_drains_with_its_own_processes_timed_from_its_log(tmp_path):
    from django.db import connection

    from outbox_bench.peers.pgqueuer_peer import PgQueuerPeer

    peer = PgQueuerPeer()
    if connection.vendor != "postgresql":
        assert peer.missing() == f"runs on PostgreSQL here, not {connection.vendor}"
        return
    if peer.missing() is not None:
        pytest.skip(f"PgQueuer: {peer.missing()}")
    f = peer.drain(100, 1, 2)
    assert f.succeeded == f.jobs == 100 and (f.processes, f.threads) == (1, 2)
    assert f.per_s == pytest.approx(100 / f.seconds) and f.enqueue_per_s > 0
    assert "log table" in f.timed and f.wal_bytes_per_job > 0
    assert _peer_leftovers() == []


def test_webhooks_ceiling_sends_the_same_deliveries_and_reports_the_ratio(capsys, tmp_path):
    from django_outbox.models import Delivery, Endpoint, Message

    call_command(
        "outbox_bench", "webhooks", "--deliveries", "40", "--fan-out", "4", "--processes", "1",
        "--concurrency", "2", "--parts", "throughput,ceiling",
        "--json", str(tmp_path / "hooks.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = _bench_json(tmp_path / "hooks.json")
    assert figures["throughput"]["workers"] == "runworker"
    assert figures["throughput"]["succeeded"] == 40
    for key, client in (("ceiling", "httpcore"), ("ceiling_httpx", "httpx")):
        c = figures[key]
        assert c["client"] == client
        assert c["succeeded"] == c["deliveries"] == c["requests"] == 40
        assert (c["processes"], c["threads"]) == (1, 2) and c["per_s"] > 0
        assert c["ratio"] == pytest.approx(figures["throughput"]["attempts_per_s"] / c["per_s"])
        assert f"plain-HTTP ceiling ({client}): the same 40 signed POSTs" in out
        assert re.search(rf"django_outbox / plain-HTTP ceiling \({client}\): \d+%", out)
    assert not Message.objects.exists() and not Endpoint.objects.exists()
    assert not Delivery.objects.exists() and not Job.objects.exists()

    call_command(
        "outbox_bench", "webhooks", "--deliveries", "8", "--fan-out", "4", "--processes", "1",
        "--concurrency", "2", "--parts", "ceiling",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "plain-HTTP ceiling (httpcore): the same 8 signed POSTs" in out
    assert "plain-HTTP ceiling (httpx): the same 8 signed POSTs" in out
    assert "django_outbox / plain-HTTP ceiling" not in out  # no throughput: no ratio


def test_webhooks_rounds_interleave_and_forked_workers_still_deliver(capsys, tmp_path):
    from django.core.management.base import CommandError

    from tests.conftest import ROOT

    call_command(
        "outbox_bench", "webhooks", "--deliveries", "8", "--fan-out", "4", "--processes", "1",
        "--concurrency", "2", "--parts", "throughput,ceiling", "--rounds", "2", "--forked",
        "--json", str(tmp_path / "hooks.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = _bench_json(tmp_path / "hooks.json")
    assert [t["workers"] for t in figures["throughput_rounds"]] == ["forked", "forked"]
    assert all(t["succeeded"] == 8 for t in figures["throughput_rounds"])
    assert len(figures["ceiling_rounds"]) == len(figures["ceiling_httpx_rounds"]) == 2
    assert out.index("round 1") < out.index("round 2")
    assert "medians of 2 round(s)" in out
    with pytest.raises(CommandError, match="use one or the other"):
        call_command(
            "outbox_bench", "webhooks", "--forked", "--worker-dir", str(ROOT), "--parts",
            "throughput",
        )  # fmt: skip


def test_workflows_drains_a_chord_and_a_chain_beside_plain_jobs_through_runworker(capsys, tmp_path):
    call_command(
        "outbox_bench", "workflows", "--jobs", "60", "--chain", "5", "--rounds", "1",
        "--processes", "1", "--concurrency", "2", "--json", str(tmp_path / "flows.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    shapes = {f["shape"]: f for f in _bench_json(tmp_path / "flows.json")["shapes"]}
    assert (shapes["plain"]["jobs"], shapes["chord"]["jobs"], shapes["chain"]["jobs"]) == (
        60,
        61,
        5,
    )
    assert all(f["drain_per_s"] > 0 for f in shapes.values())
    # The chord's callback started after its last member finished.
    assert shapes["chord"]["callback_wait_ms"] >= 0
    assert shapes["chain"]["ms_per_step"] > 0 and "of plain" in out
    assert not Job.objects.exists() and not Workflow.objects.exists()


def test_keys_drains_keyed_jobs_beside_unkeyed_ones_and_times_claims_behind_a_busy_key(
    capsys, tmp_path
):
    call_command(
        "outbox_bench", "keys", "--jobs", "60", "--keys", "6", "--stuck", "200", "--others",
        "30", "--batch", "10", "--rounds", "1", "--processes", "1", "--concurrency", "2",
        "--json", str(tmp_path / "keys.json"),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = _bench_json(tmp_path / "keys.json")
    drains = {f["shape"]: f for f in figures["drain"]}
    assert (drains["unkeyed"]["keys"], drains["keyed"]["keys"]) == (0, 6)
    assert all(f["drain_per_s"] > 0 for f in drains.values())
    claims = {c["rows"]: c for c in figures["claims"]}
    assert [c["claims"] for c in claims.values()] == [3, 3, 3]  # 30 jobs, 10 at a time
    # The held jobs are out of the claim's way: it sends the same statements.
    assert claims["held"]["statements_per_claim"] == claims["none"]["statements_per_claim"]
    assert "of unkeyed" in out and "200 held" in out
    assert not Job.objects.exists()


def test_depth_drains_each_size_beside_the_plain_insert_and_the_ceiling(capsys, tmp_path):
    from django.db import connection

    call_command(
        "outbox_bench", "depth", "--sizes", "300,150", "--rounds", "1", "--processes", "1",
        "--concurrency", "2", "--finished", "500", "--json", str(tmp_path / "depth.json"),
        "--plot", str(tmp_path),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = json.loads((tmp_path / "depth.json").read_text())["figures"]["depth"]
    assert [f["jobs"] for f in figures] == [150, 300]  # smallest first
    for f in figures:
        assert f["drain_per_s"] > 0 and f["enqueue_per_s"] > 0 and f["plain_insert_per_s"] > 0
        assert 0 < f["statements_per_job"] < 1
        assert (f["ceiling_per_s"] is None) == (connection.vendor == "sqlite")
        assert re.search(rf"^\s+{f['jobs']:,}\s+[\d,]+\s+[\d,]+\s+\d+%\s+[\d,]+", out, re.M)
    plain = "COPY" if connection.vendor == "postgresql" else "multi-row INSERT"
    assert f"plain: {plain} of rows of the same columns" in out
    assert (tmp_path / "depth.png").read_bytes()[:4] == b"\x89PNG"
    assert not Job.objects.exists()  # the queued jobs and the history are gone


def test_bulk_times_each_writer_beside_the_plain_insert_and_cleans_up(capsys, tmp_path):
    from django_outbox.models import Delivery, Endpoint, Message, WorkflowStep

    call_command(
        "outbox_bench", "bulk", "--jobs", "400", "--rounds", "2", "--endpoints", "20",
        "--json", str(tmp_path / "bulk.json"), "--plot", str(tmp_path),
    )  # fmt: skip
    out = capsys.readouterr().out
    figures = json.loads((tmp_path / "bulk.json").read_text())["figures"]["bulk"]
    assert [f["writer"] for f in figures] == ["enqueue_many", "group", "webhooks"]
    for f in figures:
        assert f["jobs"] == 400 and f["per_s"] > 0 and f["plain_per_s"] > 0
        assert f["of_plain"] > 0 and f["same_work_per_s"] > 0 and f["of_same_work"] > 0
        row = rf"^\s+{f['writer']}\s+[\d,]+\s+[\d,]+\s+\d+%\s+[\d,]+\s+\d+%$"
        assert re.search(row, out, re.M)
    # enqueue_many writes job rows only: its same work is the plain insert of them.
    assert figures[0]["same_work_per_s"] == figures[0]["plain_per_s"]
    assert "same: " in out and "of every row the writer writes" in out
    assert "webhook sends to 20 endpoints each" in out
    assert (tmp_path / "bulk.png").read_bytes()[:4] == b"\x89PNG"
    # What the writers wrote is gone; the endpoints too.
    assert not Job.objects.exists() and not Workflow.objects.exists()
    assert not WorkflowStep.objects.exists() and not Delivery.objects.exists()
    assert not Message.objects.exists() and not Endpoint.objects.exists()


def test_bulk_refuses_jobs_the_endpoints_do_not_divide():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="must be a multiple of --endpoints"):
        call_command("outbox_bench", "bulk", "--jobs", "1001", "--endpoints", "100")
    assert not Job.objects.exists()


def test_depth_refuses_bad_sizes_before_starting_anything():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="sizes must be whole numbers of at least 1"):
        call_command("outbox_bench", "depth", "--sizes", "0,10")
    with pytest.raises(CommandError, match="--finished must be 0 or more"):
        call_command("outbox_bench", "depth", "--finished", "-1")
    assert not Job.objects.exists()
