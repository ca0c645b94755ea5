"""A small run of each benchmark, so the suite notices when one stops working."""

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
    assert "succeeded               300 of 300" in out
    assert f"{processes} processes x 2 threads" in out
    per_job = float(out.split("statements per job")[1].split()[0])
    assert 0 < per_job < 1
    assert not Job.objects.exists()  # the benchmark cleans up after itself


def test_latency_and_idle_run_and_print_a_row_per_mode(capsys):
    call_command("outbox_bench", "latency", "--jobs", "10", "--gap-ms", "10", "--modes", "poll")
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("poll"))
    p50, p95, p99, worst = (float(x) for x in row.split()[1:])
    assert 0 < p50 <= p95 <= p99 <= worst < 5000
    call_command("outbox_bench", "idle", "--workers", "1", "--seconds", "1", "--modes", "poll")
    assert "statements/s per worker" in capsys.readouterr().out
