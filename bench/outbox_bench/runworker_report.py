"""The command-line side of ``outbox_bench latency`` and ``outbox_bench limited``, the
benchmarks that measure ``runworker`` processes as a user runs them: their arguments, the
checks on them, and the tables they print (``latency.py`` and ``limited.py`` measure).
"""

from __future__ import annotations

import argparse
import math
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from django_outbox.management.commands.runworker import non_negative_int, positive_int
from django_outbox.management.commands.runworker import seconds as seconds_arg
from outbox_bench import latency as pickup
from outbox_bench.arguments import whole_numbers
from outbox_bench.limited import TARGET_RATIO, default_deadline
from outbox_bench.limited import limited as drain_limited
from outbox_bench.runworkers import PROJECT_DIR, WorkerStartError, check_worker_dir

# -- arguments -----------------------------------------------------------------------


def concurrency_list(text: str) -> list[int]:
    return whole_numbers(text, "thread counts", "thread counts must be at least 1")


def enqueue_list(text: str) -> list[str]:
    modes = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [mode for mode in modes if mode not in pickup.ENQUEUE_MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"how jobs are enqueued: {' or '.join(pickup.ENQUEUE_MODES)} (comma-separated), "
            f"not {', '.join(unknown) or repr(text)}"
        )
    return modes


def positive_seconds(text: str) -> float:
    value = seconds_arg(text)
    if value <= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def settle_seconds(text: str) -> float:
    value = seconds_arg(text)
    if value > 600:
        raise argparse.ArgumentTypeError(f"must be at most 600 seconds, got {text}")
    return value


def worker_dir(text: str) -> Path:
    try:
        return check_worker_dir(Path(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_runworker_arguments(parser: CommandParser | argparse.ArgumentParser) -> None:
    """What the two workloads share: where the workers come from and how long to wait."""
    parser.add_argument(
        "--settle",
        type=settle_seconds,
        default=2.0,
        help="Seconds the workers idle, once each has started, before the first job (default 2).",
    )
    parser.add_argument(
        "--worker-dir",
        type=worker_dir,
        default=PROJECT_DIR,
        metavar="DIR",
        help="A checkout of this project whose manage.py starts the workers (default: this "
        "one), to measure another version's worker against this database.",
    )
    parser.add_argument(
        "--enqueuer-dir",
        type=worker_dir,
        default=None,
        metavar="DIR",
        help="The checkout whose code enqueues the jobs, and so sends their wake-ups "
        "(default: --worker-dir's).",
    )


def add_latency_arguments(parser: CommandParser) -> None:
    parser.add_argument("--jobs", type=positive_int, default=200, help="Jobs per pattern.")
    parser.add_argument(
        "--gap-ms",
        type=non_negative_int,
        default=50,
        help="Milliseconds from one job (or burst) to the next (default 50).",
    )
    parser.add_argument(
        "--burst",
        type=positive_int,
        default=1,
        help="Jobs enqueued back to back every --gap-ms (default 1: single jobs).",
    )
    parser.add_argument(
        "--concurrency",
        type=concurrency_list,
        default=[1],
        help="The workers' threads, runworker --concurrency; comma-separated for several "
        "rows (default 1).",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="runworker processes (default 1).",
    )
    parser.add_argument(
        "--enqueue",
        type=enqueue_list,
        default=None,
        help="How the enqueuing process enqueues each job: autocommit (task.enqueue() on "
        "its own) or atomic (in its own transaction.atomic()); comma-separated for both "
        "(default autocommit).",
    )
    parser.add_argument(
        "--in-transaction",
        action="store_true",
        help="The same as --enqueue atomic.",
    )
    parser.add_argument(
        "--wake",
        "--modes",
        dest="modes",
        default="",
        help="OUTBOX['WAKE'] for the workers and the enqueuing process: poll, postgres, "
        "redis; comma-separated for a row each (default: all available here).",
    )
    parser.add_argument("--queue", default="default", help="The queue (default: default).")
    parser.add_argument(
        "--deadline",
        type=positive_seconds,
        default=60.0,
        help="Seconds after the last enqueue by which a job must have run, or count as not "
        "run (default 60: twice the stalled check).",
    )
    _add_runworker_arguments(parser)
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="Also measure each shape's pattern with the raw-SQL pickup ceiling (a plain "
        "psycopg LISTEN worker process; PostgreSQL), and print the ratios.",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="The earlier measurement (figures up to 2026-12-03): one worker on a thread of "
        "this process, one job every --gap-ms, pickup from enqueued_at to the claim.",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="Also measure the raw-SQL ceiling and the installed peers the earlier way (one "
        "idle worker, one job every --gap-ms).",
    )


def add_limited_parser(workloads: Any) -> None:
    parser = workloads.add_parser(
        "limited",
        help="Drain a queue with a global concurrency limit with several runworker processes.",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="Also write the figures to FILE.")
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=1,
        help="OUTBOX['QUEUES'][queue]['concurrency'] (default 1).",
    )
    parser.add_argument("--workers", type=positive_int, default=3, help="runworker processes.")
    parser.add_argument(
        "--concurrency", type=positive_int, default=4, help="Threads per runworker (default 4)."
    )
    parser.add_argument("--jobs", type=positive_int, default=12)
    parser.add_argument(
        "--job-seconds",
        type=job_seconds,
        default=0.3,
        help="How long each job sleeps (default 0.3).",
    )
    parser.add_argument(
        "--queue",
        default="reports",
        help="The limited queue; one of TASKS' QUEUES (default reports).",
    )
    parser.add_argument(
        "--wake",
        "--modes",
        dest="modes",
        default="",
        help="OUTBOX['WAKE'] for the workers and the enqueuing process: poll, postgres or "
        "redis (default: the project's setting).",
    )
    parser.add_argument(
        "--deadline",
        type=positive_seconds,
        default=None,
        help="Seconds after the enqueue by which every job must have run (default: room for "
        "each to wait for a 30 s stalled check, and a minute).",
    )
    _add_runworker_arguments(parser)


def job_seconds(text: str) -> float:
    value = positive_seconds(text)
    if value > 60:
        raise argparse.ArgumentTypeError(f"must be at most 60 seconds, got {text}")
    return value


# -- latency ---------------------------------------------------------------------------


#: What --in-process cannot take: (option, its default).
_RUNWORKER_ONLY = (
    ("burst", 1),
    ("concurrency", [1]),
    ("workers", 1),
    ("enqueue", None),
    ("in_transaction", False),
    ("worker_dir", PROJECT_DIR),
    ("enqueuer_dir", None),
    ("ceiling", False),
)


def check_in_process(options: dict[str, Any]) -> None:
    given = [name for name, default in _RUNWORKER_ONLY if options.get(name, default) != default]
    if given:
        names = ", ".join("--" + name.replace("_", "-") for name in given)
        raise CommandError(
            f"--in-process measures the earlier pattern only (one job every --gap-ms to one "
            f"worker on a thread of this process): {names} measure runworker processes; "
            "leave out --in-process"
        )


def _enqueue_modes(options: dict[str, Any]) -> list[str]:
    modes = list(options["enqueue"] or [])
    if options["in_transaction"] and "atomic" not in modes:
        modes.append("atomic")
    return modes or ["autocommit"]


def latency(command: BaseCommand, options: dict[str, Any], wakes: list[str]) -> None:
    """Every pattern: each thread count x enqueue mode x wake mode, each with fresh workers,
    then that shape's ceiling (--ceiling)."""
    try:
        _latency(command, options, wakes)
    except WorkerStartError as exc:
        raise CommandError(str(exc)) from exc


def _latency(command: BaseCommand, options: dict[str, Any], wakes: list[str]) -> None:
    write = command.stdout.write
    results: dict[str, Any] = getattr(command, "results", {"figures": {}})
    enqueues = _enqueue_modes(options)
    patterns = [
        pickup.Pattern(
            wake=wake,
            workers=options["workers"],
            concurrency=concurrency,
            jobs=options["jobs"],
            gap_ms=options["gap_ms"],
            burst=options["burst"],
            enqueue=enqueue,
        )
        for concurrency in options["concurrency"]
        for enqueue in enqueues
        for wake in wakes
    ]
    first = patterns[0]
    argv = ["python", "manage.py", "runworker", "--concurrency", "N", "--queues", options["queue"]]
    enqueuer_dir = options["enqueuer_dir"] or options["worker_dir"]
    write(
        f"outbox_bench latency, {connection.vendor}: {first.jobs} jobs per row, {first.arrivals()}"
    )
    write(
        f"  workers: {options['workers']} x `{shlex.join(argv)}` in {options['worker_dir']}, "
        f"started for each row, idle for {options['settle']:g} s before the first job"
    )
    write(
        f"  enqueued by `python -m outbox_bench_enqueue` in {enqueuer_dir} (a process of the "
        "site, up throughout), each job in its own autocommit or transaction.atomic()"
    )
    write(
        "  pickup: the job's start, recorded in the worker, minus the return of its "
        f"enqueue(); not run: not run {options['deadline']:g} s after the last enqueue"
    )
    columns = "".join(f"{name:>10}" for name in ("p50 ms", "p95 ms", "p99 ms", "max ms"))
    header = f"  {'wake / system':<17}{'shape':<7}{'enqueue':<12}{columns}{'>1 s':>7}{'not run':>9}"
    write(header)
    rows = results["figures"].setdefault("modes", [])
    ratios = results["figures"].setdefault("ceiling_ratios", [])
    for index, pattern in enumerate(patterns):
        f = pickup.measure(
            pattern,
            queue=options["queue"],
            settle=options["settle"],
            deadline=options["deadline"],
            worker_dir=options["worker_dir"],
            enqueuer_dir=options["enqueuer_dir"],
        )
        rows.append(asdict(f))
        write(_row(f.wake, f))
        said = _workers_line(f.worker_pids, f.worker_wakes, f.worker_exit_codes, f.wake)
        write(f"      runworker {said}")
        following = patterns[index + 1] if index + 1 < len(patterns) else None
        if not options["ceiling"] or (
            following is not None
            and (following.concurrency, following.enqueue) == (pattern.concurrency, pattern.enqueue)
        ):
            continue
        if connection.vendor != "postgresql":
            write(
                f"  {'raw-SQL ceiling':<17}not measured: PostgreSQL only, not {connection.vendor} "
                "(it waits on LISTEN/NOTIFY)"
            )
            continue
        c = pickup.measure_ceiling(pattern, deadline=options["deadline"])
        rows.append(asdict(c))
        write(_row("raw-SQL ceiling", c))
        for ours in rows:
            if ours["system"] != "django_outbox" or (ours["concurrency"], ours["enqueue"]) != (
                pattern.concurrency,
                pattern.enqueue,
            ):
                continue
            ratio = {
                "mode": ours["mode"],
                "p50": ours["p50_ms"] / c.p50_ms if c.p50_ms else math.nan,
                "p99": ours["p99_ms"] / c.p99_ms if c.p99_ms else math.nan,
            }
            ratios.append(ratio)
            write(
                f"      {ours['wake']} / ceiling: p50 {ratio['p50']:.1f}x, p99 {ratio['p99']:.1f}x"
            )
    peers = getattr(command, "peer_rows", None)
    if options["peers"] and peers is not None:
        write(
            f"  peers, measured the earlier way (one idle worker of each on threads or "
            f"processes of its own, {options['jobs']} jobs {options['gap_ms']} ms apart, from "
            "each one's own enqueue and start timestamps):"
        )
        for name, p in peers(options, "latency"):
            if isinstance(p, str):
                cells = p
            else:
                cells = "".join(f"{v:>10.1f}" for v in (p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms))
            write(f"  {name:<16}{cells}")


def _row(name: str, f: pickup.PickupFigures) -> str:
    cells = "".join(f"{v:>10.1f}" for v in (f.p50_ms, f.p95_ms, f.p99_ms, f.max_ms))
    shape = f"{f.workers}x{f.concurrency}"
    return f"  {name:<17}{shape:<7}{f.enqueue:<12}{cells}{f.over_1s:>7}{f.not_run:>9}"


def _workers_line(
    pids: list[int], wakes: list[str | None], exits: list[int | None], asked: str | None
) -> str:
    """What became of the runworker processes: started, what they said, how they ended."""
    said = ", ".join(wake or "?" for wake in wakes)
    odd = [w for w in wakes if w is not None and asked is not None and w != asked]
    warning = f" (not the {asked} asked for)" if odd else ""
    codes = ", ".join("killed" if code == -9 else str(code) for code in exits)
    return (
        f"pid {', '.join(str(pid) for pid in pids)}: started (wake-ups: {said}"
        f"{warning}), stopped by SIGTERM, exit {codes}"
    )


# -- limited ---------------------------------------------------------------------------


def limited(command: BaseCommand, options: dict[str, Any], wakes: list[str]) -> None:
    try:
        _limited(command, options, wakes)
    except WorkerStartError as exc:
        raise CommandError(str(exc)) from exc


def _limited(command: BaseCommand, options: dict[str, Any], wakes: list[str]) -> None:
    if len(wakes) > 1:
        raise CommandError(f"limited takes one wake mode, not {', '.join(wakes)}")
    write = command.stdout.write
    results: dict[str, Any] = getattr(command, "results", {"figures": {}})
    wake = wakes[0] if wakes else None
    deadline = options["deadline"] or default_deadline(
        options["jobs"], options["job_seconds"], options["limit"]
    )
    argv = [
        "python", "manage.py", "runworker", "--concurrency", str(options["concurrency"]),
        "--queues", options["queue"],
    ]  # fmt: skip
    enqueuer_dir = options["enqueuer_dir"] or options["worker_dir"]
    write(
        f"outbox_bench limited, {connection.vendor}: queue {options['queue']!r} limited to "
        f"{options['limit']} (OUTBOX['QUEUES']), {options['jobs']} jobs of "
        f"{options['job_seconds']:g} s"
    )
    write(
        f"  workers: {options['workers']} x `{shlex.join(argv)}` in {options['worker_dir']}, "
        f"wake-ups: {wake or 'the project setting'}, idle for {options['settle']:g} s first"
    )
    write(
        f"  enqueued at once by `python -m outbox_bench_enqueue` in {enqueuer_dir}, one "
        "autocommit each"
    )
    f = drain_limited(
        limit=options["limit"],
        workers=options["workers"],
        concurrency=options["concurrency"],
        jobs=options["jobs"],
        job_seconds=options["job_seconds"],
        queue=options["queue"],
        wake=wake,
        settle=options["settle"],
        deadline=deadline,
        worker_dir=options["worker_dir"],
        enqueuer_dir=options["enqueuer_dir"],
    )
    results["figures"]["limited"] = asdict(f)
    ran = f"{f.ran} of {f.jobs}"
    if f.not_run:
        ran += f" ({f.not_run} not run within {deadline:g} s of the enqueue)"
    rows = [
        ("ran", ran),
        ("drain", f"{f.drain_seconds:.2f} s (at the limit, with no gaps: {f.ideal_seconds:.2f} s)"),
        (
            "drain rate",
            f"{f.drain_per_s:.2f} jobs/s; the limit allows {f.target_per_s:.2f}: "
            f"{f.ratio:.0%} of it (target {TARGET_RATIO:.0%})",
        ),
        ("most running at once", f"{f.max_running} (limit {f.limit})"),
        (
            "end -> next start",
            f"p50 {f.gap_p50_ms:.1f} ms, p99 {f.gap_p99_ms:.1f} ms, max {f.gap_max_ms:.1f} ms "
            f"({f.gaps} places handed over; {f.slow_gaps} over 1 s)",
        ),
        ("runworker", _workers_line(f.worker_pids, f.worker_wakes, f.worker_exit_codes, wake)),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        write(f"  {name:<{width}}  {value}")
