"""A small run of each benchmark, so the suite notices when one stops working."""

import re

import pytest
from django.core.management import call_command

from django_outbox.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_drain_with_peers_measures_the_raw_sql_ceiling_in_the_same_shape(capsys):
    from django.db import connection

    call_command(
        "outbox_bench", "drain", "--jobs", "300", "--processes", "2", "--concurrency", "2",
        "--peers",
    )  # fmt: skip
    out = capsys.readouterr().out
    ceiling = next(line for line in out.splitlines() if "raw-SQL ceiling" in line)
    if connection.vendor != "postgresql":
        assert "not measured: PostgreSQL only, not sqlite" in ceiling
        return
    assert "300 succeeded" in ceiling
    # 2 x 2 threads claim batches of 50: a claim and a completion per batch, and one empty
    # claim per thread at the end.
    per_job = float(ceiling.split("succeeded; ")[1].split()[0])
    assert 0.04 <= per_job <= (2 * 6 + 4) / 300
    ratio = next(line for line in out.splitlines() if "django_outbox / ceiling" in line)
    assert ratio.strip().endswith("% of its drain rate")
    wal = next(line for line in out.splitlines() if "WAL: django_outbox / ceiling" in line)
    assert float(wal.split()[-1].rstrip("x")) > 0
    with connection.cursor() as cursor:  # the ceiling's table is gone after the run
        cursor.execute("SELECT to_regclass('outbox_bench_ceiling')")
        assert cursor.fetchone()[0] is None


def test_latency_and_idle_run_and_print_a_row_per_mode(capsys):
    call_command("outbox_bench", "latency", "--jobs", "10", "--gap-ms", "10", "--modes", "poll")
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
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [(row[0], row[1]) for row in rows] == [("1", "5.0"), ("3", "5.0")]
    # It cleans up after itself.
    assert not Message.objects.exists() and not Endpoint.objects.exists()
    assert not Delivery.objects.exists() and not Job.objects.exists()


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
    call_command("outbox_bench", "fanout", "--sizes", "1,5", "--queues", "1,4", "--jobs", "40")
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
