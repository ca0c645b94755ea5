"""``python manage.py outbox_bench WORKLOAD``: measure django_outbox on this database.

Run it against a scratch database: it enqueues and deletes its own jobs, and its
workers also run any other due job in the queue it uses.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.test.utils import override_settings

from django_outbox.management.commands.runworker import batch_size, positive_int
from django_outbox.management.commands.runworker import seconds as seconds_arg
from django_outbox.migrated import require_migrated
from outbox_bench import ceiling, runworker_report, wakeups
from outbox_bench.arguments import history_days, names, whole_numbers
from outbox_bench.drain import (
    LOGGING_CHOICES,
    DrainError,
    DrainFigures,
    check_worker_dir,
    default_worker_dir,
    drain,
    worker_package,
)
from outbox_bench.peers import PeerError, all_peers
from outbox_bench.peers.base import IDLE_SETTLE_SECONDS


class Command(BaseCommand):
    help = "Benchmark django_outbox on the configured database and print the figures."

    def add_arguments(self, parser: CommandParser) -> None:
        # Every workload takes --json: its figures, machine-readable, next to the table.
        common = CommandParser(add_help=False)
        common.add_argument(
            "--json",
            type=Path,
            metavar="FILE",
            help="Also write the figures to FILE as JSON.",
        )
        common.add_argument(
            "--plot",
            type=Path,
            metavar="DIR",
            help="Also draw the figures to DIR/<workload>.png (needs the bench extra).",
        )
        workloads = parser.add_subparsers(dest="workload", required=True)
        drain_parser = workloads.add_parser(
            "drain",
            parents=[common],
            help="Enqueue N no-op jobs, then time workers emptying the queue.",
        )
        drain_parser.add_argument("--jobs", type=positive_int, default=20000)
        drain_parser.add_argument("--processes", type=positive_int, default=2)
        drain_parser.add_argument("--concurrency", type=positive_int, default=4)
        drain_parser.add_argument("--batch-size", type=batch_size, default=None)
        drain_parser.add_argument("--queue", default="default")
        drain_parser.add_argument(
            "--peers",
            action="store_true",
            help="Also drain the same number of jobs in the same shape with the raw-SQL "
            "ceiling (PostgreSQL, MariaDB) and the installed peers (the bench-peers extra), "
            "and print the ratios.",
        )
        drain_parser.add_argument(
            "--peer-jobs",
            type=positive_int,
            default=None,
            help="Jobs for each peer to drain (default: --jobs); the slow ones take minutes.",
        )
        drain_parser.add_argument(
            "--peer-names",
            type=peer_names,
            default=None,
            metavar="NAMES",
            help=f"With --peers, only these peers (comma-separated, of {', '.join(PEER_NAMES)}).",
        )
        drain_parser.add_argument(
            "--ceiling",
            action="store_true",
            help="Drain with the raw-SQL ceiling too (PostgreSQL, MariaDB), round by round, and "
            "print the ratios, without the peers (--peers does both).",
        )
        drain_parser.add_argument(
            "--rounds",
            type=positive_int,
            default=1,
            help="Drain this many times (with --peers, alternating with the raw-SQL ceiling) "
            "and report the best of each and every round's ratio: a drain of a few seconds "
            "on a shared machine varies by a third from one run to the next.",
        )
        drain_parser.add_argument(
            "--logging",
            choices=LOGGING_CHOICES,
            default="project",
            help="The runworker processes' logging: the project's LOGGING (default), "
            "Django's default logging (a project without LOGGING), or every logger at INFO.",
        )
        drain_parser.add_argument(
            "--forked",
            action="store_true",
            help="Fork the workers from this process after the enqueue (the form the figures "
            "up to 2026-12-03 were measured with) instead of starting runworker processes.",
        )
        drain_parser.add_argument(
            "--worker-dir",
            type=checkout_dir,
            default=None,
            metavar="DIR",
            help="A checkout of this project whose manage.py starts the runworker processes "
            "(default: this one), e.g. an older one, for a before/after table on one database.",
        )
        latency_parser = workloads.add_parser(
            "latency",
            parents=[common],
            help="Pickup latency of idle runworker processes, per wake mode and pattern.",
        )
        runworker_report.add_latency_arguments(latency_parser)
        runworker_report.add_limited_parser(workloads)
        idle_parser = workloads.add_parser(
            "idle", parents=[common], help="Statements per second of idle workers, per wake mode."
        )
        idle_parser.add_argument("--workers", type=positive_int, default=4)
        idle_parser.add_argument("--seconds", type=positive_int, default=30)
        idle_parser.add_argument("--modes", default="", help="Comma-separated; default: all.")
        idle_parser.add_argument("--queue", default="default")
        idle_parser.add_argument(
            "--peers", action="store_true", help="Also measure the installed peers."
        )
        idle_parser.add_argument(
            "--settle",
            type=settle_seconds,
            default=None,
            help="Seconds the peers' workers idle before their window opens (default: what "
            "each needs for its start-up polls to pass, 8 to 11 s; less for a quick check).",
        )

        hooks = workloads.add_parser(
            "webhooks",
            parents=[common],
            help="Deliveries/s to a local receiver, a retry burst, and the fan-out sweep.",
        )
        hooks.add_argument("--deliveries", type=positive_int, default=10000)
        hooks.add_argument("--processes", type=positive_int, default=2)
        hooks.add_argument("--concurrency", type=positive_int, default=32)
        hooks.add_argument("--fan-out", type=positive_int, default=50)
        hooks.add_argument("--retries", type=positive_int, default=2000)
        hooks.add_argument("--sizes", type=size_list, default=[1, 10, 100, 1000])
        hooks.add_argument(
            "--parts",
            type=part_list,
            default=list(WEBHOOK_PARTS),
            help=f"Comma-separated, of {', '.join(WEBHOOK_PARTS)} (default: all).",
        )
        hooks.add_argument(
            "--rounds",
            type=positive_int,
            default=1,
            help="Run the throughput and the ceilings this many times, interleaved, and "
            "report the medians and their ratios.",
        )
        hooks.add_argument(
            "--forked",
            action="store_true",
            help="Fork the throughput's workers from this process instead of starting "
            "runworker processes.",
        )
        hooks.add_argument(
            "--worker-dir",
            type=checkout_dir,
            default=None,
            metavar="DIR",
            help="A checkout of this project whose manage.py starts the runworker processes "
            "(default: this one).",
        )

        spread = workloads.add_parser(
            "fanout",
            parents=[common],
            help="Statements and WAL per call as one send or one enqueue spreads wider.",
        )
        spread.add_argument("--sizes", type=size_list, default=[1, 10, 100, 1000])
        spread.add_argument("--queues", type=size_list, default=[1, 10, 100])
        spread.add_argument("--jobs", type=positive_int, default=1000)

        storm = workloads.add_parser(
            "retry-storm",
            parents=[common],
            help="Jobs contending for one row, retrying: full jitter vs a fixed ladder.",
        )
        storm.add_argument("--jobs", type=positive_int, default=100)
        storm.add_argument("--hold-ms", type=positive_int, default=5)
        storm.add_argument("--concurrency", type=positive_int, default=8)
        storm.add_argument("--queue", default="default")

        flows = workloads.add_parser(
            "workflows",
            parents=[common],
            help="A chord and a chain against the same jobs without a workflow, through runworker.",
        )
        flows.add_argument("--jobs", type=positive_int, default=10_000)
        flows.add_argument("--chain", type=positive_int, default=200)
        flows.add_argument("--rounds", type=positive_int, default=3)
        flows.add_argument("--processes", type=positive_int, default=2)
        flows.add_argument("--concurrency", type=positive_int, default=8)

        keyed = workloads.add_parser(
            "keys",
            parents=[common],
            help="Jobs with concurrency keys against the same jobs without, through runworker; "
            "and the claim of other jobs behind one busy key.",
        )
        keyed.add_argument("--jobs", type=positive_int, default=20_000)
        keyed.add_argument("--keys", type=positive_int, default=1_000)
        keyed.add_argument("--stuck", type=positive_int, default=10_000)
        keyed.add_argument("--others", type=positive_int, default=5_000)
        keyed.add_argument("--batch", type=positive_int, default=100)
        keyed.add_argument("--rounds", type=positive_int, default=3)
        keyed.add_argument("--processes", type=positive_int, default=2)
        keyed.add_argument("--concurrency", type=positive_int, default=8)

        deep = workloads.add_parser(
            "depth",
            parents=[common],
            help="The drain at several queue depths, beside COPY and the raw-SQL queue: a "
            "cost per job that grows with the work shows as a falling rate.",
        )
        deep.add_argument("--sizes", type=size_list, default=[10_000, 100_000])
        deep.add_argument("--rounds", type=positive_int, default=3)
        deep.add_argument("--processes", type=positive_int, default=2)
        deep.add_argument("--concurrency", type=positive_int, default=4)
        deep.add_argument("--queue", default="default")
        deep.add_argument(
            "--finished",
            type=int,
            default=0,
            help="Keep this many finished jobs in the table through every round (a week of "
            "history with retention on), e.g. 5000000.",
        )
        deep.add_argument(
            "--no-ceiling",
            action="store_true",
            help="Leave out the raw-SQL queue's drain (PostgreSQL, MariaDB).",
        )
        deep.add_argument("--worker-dir", type=checkout_dir, default=None, metavar="DIR")
        deep.add_argument(
            "--logging",
            choices=LOGGING_CHOICES,
            default="project",
            help="The runworker processes' logging: the project's LOGGING (default), "
            "Django's default logging (a project without LOGGING), or every logger at INFO.",
        )
        bulk = workloads.add_parser(
            "bulk",
            parents=[common],
            help="Bulk writes (enqueue_many, a workflow group, webhook sends) against the plain "
            "insert of the same rows (COPY on PostgreSQL).",
        )
        bulk.add_argument("--jobs", type=positive_int, default=100_000)
        bulk.add_argument("--rounds", type=positive_int, default=3)
        bulk.add_argument(
            "--endpoints",
            type=positive_int,
            default=100,
            help="Endpoints each webhook send goes to: --jobs / this many sends.",
        )
        bulk.add_argument("--queue", default="default")
        board = workloads.add_parser(
            "dashboard",
            parents=[common],
            help="Render the admin's dashboard and lists over a large history of jobs.",
        )
        board.add_argument("--jobs", type=positive_int, default=1_000_000)
        board.add_argument(
            "--queued",
            type=positive_int,
            help="About how many of --jobs are queued (1 %% of them unless given).",
        )
        board.add_argument(
            "--failed",
            type=positive_int,
            help="About how many of --jobs failed (2 %% of them unless given).",
        )
        board.add_argument("--attempts", type=positive_int, default=1_000_000)
        board.add_argument(
            "--days",
            type=history_days,
            default=7,
            help="Days the history spans; the oldest one is pruned at the end.",
        )
        board.add_argument("--rounds", type=positive_int, default=5)

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated("python manage.py outbox_bench")
        logger = logging.getLogger("django_outbox")
        previous = logger.level
        # Quiet workers; for webhooks and the retry storm, retries are the point: their
        # warnings too.
        logger.setLevel(
            logging.ERROR if options["workload"] in ("webhooks", "retry-storm") else logging.WARNING
        )
        self.results: dict[str, Any] = {
            "workload": options["workload"],
            "database": connection.vendor,
            "options": {k: v for k, v in options.items() if k not in _NOT_WORKLOAD_OPTIONS},
            "figures": {},
        }
        out = options.get("json")
        if out is not None:
            try:  # find out now, not after a long run, that the file cannot be written
                out.open("a").close()
            except OSError as exc:
                raise CommandError(f"--json: cannot write {out}: {exc.strerror or exc}") from exc
        charts = options.get("plot")
        if charts is not None:
            # Found, not imported: the drain's workers are forked from this process, and
            # would count matplotlib in their memory.
            if importlib.util.find_spec("matplotlib") is None:
                raise CommandError(
                    "--plot needs matplotlib: pip install 'django-outbox-tasks[bench]'"
                )
            if not charts.is_dir():
                raise CommandError(f"--plot: {charts} is not a directory")
        try:
            # As production workers run: with DEBUG on, Django logs every statement with its
            # parameters quoted (on SQLite, by a query per statement), which the drain would
            # measure too (about 15 % of it on SQLite).
            with override_settings(DEBUG=False):
                self.run_workload(options)
        finally:
            logger.setLevel(previous)
        if charts is not None:
            from outbox_bench.plots import plot

            self.stdout.write(f"chart drawn to {plot(self.results, charts)}")
        if out is not None:
            out.write_text(json.dumps(self.results, indent=2, default=str) + "\n")
            self.stdout.write(f"figures written to {out}")

    def run_workload(self, options: dict[str, Any]) -> None:
        if options["workload"] == "webhooks":
            return self.webhooks(options)
        if options["workload"] == "latency":
            return self.latency(options)
        if options["workload"] == "limited":
            return self.limited(options)
        if options["workload"] == "idle":
            return self.idle(options)
        if options["workload"] == "dashboard":
            return self.dashboard(options)
        if options["workload"] == "workflows":
            return self.workflows(options)
        if options["workload"] == "keys":
            return self.keys(options)
        if options["workload"] == "depth":
            return self.depth(options)
        if options["workload"] == "bulk":
            return self.bulk(options)
        if options["workload"] == "retry-storm":
            return self.retry_storm(options)
        if options["workload"] == "fanout":
            return self.fanout(options)
        compared = options["peers"] or options["ceiling"]
        with_ceiling = compared and ceiling.available()
        drains: list[DrainFigures] = []
        ceilings: list[ceiling.CeilingFigures] = []
        forked, workers_from = options["forked"], options["worker_dir"]
        package = ""
        if forked and workers_from is not None:
            raise CommandError(
                "--worker-dir names the checkout that starts runworker processes; --forked "
                "forks this process's own workers instead: use one or the other"
            )
        try:
            if not forked:
                workers_from = workers_from or default_worker_dir()
                package = worker_package(workers_from)
                self.results["figures"]["worker_package"] = package
        except DrainError as exc:
            raise CommandError(str(exc)) from exc
        for number in range(options["rounds"]):
            try:
                drains.append(
                    drain(
                        jobs=options["jobs"],
                        processes=options["processes"],
                        concurrency=options["concurrency"],
                        batch_size=options["batch_size"],
                        queue=options["queue"],
                        forked=forked,
                        worker_dir=workers_from,
                        # runworker processes start afresh every round, and the warm-up
                        # is for the database's caches: the first round's is enough.
                        warm_up=forked or number == 0,
                        logging=options["logging"],
                    )
                )
            except DrainError as exc:
                raise CommandError(str(exc)) from exc
            if with_ceiling:
                ceilings.append(
                    ceiling.drain(options["jobs"], options["processes"], options["concurrency"])
                )
        figures = max(drains, key=lambda f: f.drain_per_s)
        self.results["figures"]["drain"] = asdict(figures)
        rows = figures.rows()
        if not forked:
            at = next(i for i, (name, _) in enumerate(rows) if name == "workers")
            rows.insert(at + 1, ("workers' django_outbox", package))
        if len(drains) > 1:
            self.results["figures"]["drain_rounds"] = [f.drain_per_s for f in drains]
            at = next(i for i, (name, _) in enumerate(rows) if name == "drain")
            rows[at : at + 1] = [
                ("drain (best round)", rows[at][1]),
                ("drain, each round", ", ".join(f"{f.drain_per_s:,.0f}" for f in drains)),
            ]
        if compared:
            rows += self.ceiling(figures, drains, ceilings)
        width = max(len(name) for name, _ in rows)
        self.stdout.write("outbox_bench drain")
        for name, value in rows:
            self.stdout.write(f"  {name:<{width}}  {value}")
        if options["peers"]:
            self.peer_drains(options, figures, statistics.median(f.drain_per_s for f in drains))

    def ceiling(
        self,
        ours: DrainFigures,
        drains: list[DrainFigures],
        ceilings: list[ceiling.CeilingFigures],
    ) -> list[tuple[str, str]]:
        """The raw-SQL ceiling's drains in the same shape, and how close ours came to it:
        best against best, and round by round (each of ours against the ceiling's drain
        right after it)."""
        if not ceilings:
            return [("raw-SQL ceiling", f"not measured: {ceiling.unavailable()}")]
        c = max(ceilings, key=lambda f: f.per_s)
        ratios = [
            mine.drain_per_s / theirs.per_s for mine, theirs in zip(drains, ceilings, strict=True)
        ]
        self.results["figures"]["ceiling"] = asdict(c) | {
            "ratio": ours.drain_per_s / c.per_s,
            "round_ratios": ratios,
            "median_round_ratio": statistics.median(ratios),
        }
        wal = (
            "" if c.wal_bytes_per_job is None else f"{c.wal_bytes_per_job:,.0f} WAL bytes per job; "
        )
        rows = [
            (
                "raw-SQL ceiling" + (" (best round)" if len(ceilings) > 1 else ""),
                f"{c.per_s:,.0f} jobs/s ({c.seconds:.2f} s from its first claim to its last "
                f"batch run; {c.succeeded:,} succeeded; "
                f"{c.statements_per_job:.3f} statements per job; "
                f"{wal}batches of {ceiling.BATCH})",
            ),
            ("raw-SQL ceiling's claim", c.claim),
            ("django_outbox / ceiling", f"{ours.drain_per_s / c.per_s:.0%} of its drain rate"),
        ]
        if len(ceilings) > 1:
            rows += [
                ("raw-SQL ceiling, each round", ", ".join(f"{f.per_s:,.0f}" for f in ceilings)),
                (
                    "ours / ceiling, each round",
                    ", ".join(f"{r:.0%}" for r in ratios)
                    + f" (median {statistics.median(ratios):.0%})",
                ),
            ]
        if ours.wal_bytes_per_job is not None and c.wal_bytes_per_job is not None:
            rows.append(
                (
                    "WAL: django_outbox / ceiling",
                    f"{ours.wal_bytes_per_job / c.wal_bytes_per_job:.2f}x",
                )
            )
        return rows

    def peer_drains(self, options: dict[str, Any], ours: DrainFigures, rate: float) -> None:
        """The same drain by each installed peer, one after the other, and the ratios to
        ``rate``, ours (the median round's, with --rounds)."""
        write = self.stdout.write
        jobs = options["peer_jobs"] or options["jobs"]
        write(
            f"  peers, {jobs:,} jobs each, {ours.processes} x {ours.concurrency} "
            "(each timed from its own record of its first job's start to its last one's "
            "finish, as ours is, where it keeps one; ours / it: our "
            + ("median round's " if options["rounds"] > 1 else "")
            + f"{rate:,.0f} jobs/s over its rate):"
        )
        header = f"{'drain jobs/s':>14}{'ours / it':>11}{'enqueue/s':>11}"
        write(f"    {'peer':<16}{header}{'tx/job':>8}{'WAL B/job':>11}{'Redis cmd/job':>15}")
        fastest: tuple[str, float] | None = None
        for peer in all_peers():
            if options["peer_names"] and peer.name not in options["peer_names"]:
                continue
            missing = peer.missing()
            if missing is not None:
                write(f"    {peer.name:<16}not measured: {missing}")
                self.results["figures"].setdefault("peers", []).append(
                    {"peer": peer.name, "missing": missing}
                )
                continue
            try:
                f = peer.drain(jobs, ours.processes, ours.concurrency)
            except Exception as exc:  # one peer's failure is reported; the others go on
                write(f"    {peer.name:<16}{self.peer_failed(peer.name, exc)}")
                continue
            self.results["figures"].setdefault("peers", []).append(asdict(f))
            if fastest is None or f.per_s > fastest[1]:
                fastest = (f.peer, f.per_s)
            write(
                f"    {f.peer:<16}{f.per_s:>14,.0f}{rate / f.per_s:>10.1f}x"
                f"{f.enqueue_per_s:>11,.0f}{_cell(f.transactions_per_job, '.2f'):>8}"
                f"{_cell(f.wal_bytes_per_job, ',.0f'):>11}"
                f"{_cell(f.redis_commands_per_job, '.1f'):>15}"
            )
            write(f"      {f.how}; timed {f.timed}")
        if fastest is not None:
            ratio = rate / fastest[1]
            self.results["figures"]["fastest_peer"] = {"peer": fastest[0], "ratio": ratio}
            write(f"  django_outbox / fastest peer ({fastest[0]}): {ratio:.1f}x")

    def peer_failed(self, name: str, exc: Exception) -> str:
        """A peer that failed: its error in full on stderr and in the JSON, its first line
        in the table."""
        text = str(exc) if isinstance(exc, PeerError) else f"{type(exc).__name__}: {exc}"
        self.stderr.write(f"{name} failed:\n{text}")
        self.results["figures"].setdefault("peers", []).append({"peer": name, "failed": text})
        return f"failed: {text.splitlines()[0] if text else type(exc).__name__} (more on stderr)"

    def peer_rows(self, options: dict[str, Any], measure: str) -> list[tuple[str, Any]]:
        """``measure`` ("latency" or "idle") for the raw-SQL ceiling and each installed
        peer: (name, figures), or (name, why there are none)."""
        from outbox_bench import ceiling

        if not options["peers"]:
            return []
        rows: list[tuple[str, Any]] = []
        for peer in [None, *all_peers()]:
            name = "raw-SQL ceiling" if peer is None else peer.name
            if peer is None:
                missing = (
                    None
                    if ceiling.listens()
                    else f"PostgreSQL only, not {connection.vendor} (it waits on LISTEN/NOTIFY)"
                )
            else:
                missing = peer.missing(measure)
            if missing is not None:
                self.results["figures"].setdefault("peers", []).append(
                    {"peer": name, "missing": missing}
                )
                rows.append((name, f"not measured: {missing}"))
                continue
            f: Any
            try:
                if measure == "latency":
                    jobs, gap = options["jobs"], options["gap_ms"] / 1000
                    f = ceiling.latency(jobs, gap) if peer is None else peer.latency(jobs, gap)
                else:
                    workers, seconds = options["workers"], options["seconds"]
                    settle = options["settle"]
                    if peer is None:
                        f = ceiling.idle(
                            workers, seconds, IDLE_SETTLE_SECONDS if settle is None else settle
                        )
                    else:
                        f = peer.idle(workers, seconds, settle)
            except Exception as exc:  # one peer's failure is reported; the others go on
                rows.append((name, self.peer_failed(name, exc)))
                continue
            self.results["figures"].setdefault("peers", []).append(asdict(f))
            rows.append((name, f))
        return rows

    def dashboard(self, options: dict[str, Any]) -> None:
        from outbox_bench import dashboard

        held = (options["queued"] or 0) + (options["failed"] or 0)
        if held > options["jobs"]:
            raise CommandError(
                f"--queued and --failed ({held:,} together) are jobs of --jobs "
                f"({options['jobs']:,}): at most that many"
            )
        dashboard.clean()
        try:
            seconds = dashboard.fill(
                options["jobs"],
                options["attempts"],
                options["days"],
                queued=options["queued"],
                failed=options["failed"],
            )
            self.stdout.write(
                f"outbox_bench dashboard, {connection.vendor}: {options['jobs']:,} jobs over "
                f"{options['days']} days and {options['attempts']:,} attempts over a day "
                f"(written in {seconds:.0f} s); {options['rounds']} renders per page"
            )
            self.stdout.write(f"  {'page':<20}{'median ms':>12}{'max ms':>10}{'queries':>10}")
            pages = dashboard.time_pages(options["rounds"])
            self.results["figures"]["pages"] = [asdict(page) for page in pages]
            for page in pages:
                self.stdout.write(
                    f"  {page.page:<20}{page.median_ms:>12.1f}{page.max_ms:>10.1f}"
                    f"{page.queries:>10}"
                )
            pruned = dashboard.time_prune(options["days"])
            self.results["figures"]["prune"] = {
                "jobs": pruned.jobs,
                "seconds": pruned.seconds,
                "per_s": pruned.per_s,
            }
            self.stdout.write(
                f"  prune: {pruned.jobs:,} jobs finished over {options['days'] - 1} days ago "
                f"in {pruned.seconds:.2f} s ({pruned.per_s:,.0f} jobs/s)"
            )
        finally:
            dashboard.clean()

    def fanout(self, options: dict[str, Any]) -> None:
        from outbox_bench import fanout, webhooks

        write = self.stdout.write
        write(f"outbox_bench fanout, {connection.vendor}")

        def number(value: float | None) -> str:
            return "-" if value is None else f"{value:,.0f}"

        sends = webhooks.fan_out(options["sizes"])
        self.results["figures"]["webhooks"] = [asdict(row) for row in sends]
        write("  one webhooks.send() to E matching endpoints")
        write(f"  {'E':>8}{'statements/send':>18}{'WAL bytes/send':>18}")
        for row in sends:
            write(
                f"  {row.endpoints:>8,}{row.statements_per_send:>18.1f}"
                f"{number(row.wal_bytes_per_send):>18}"
            )
        spreads = fanout.jobs_over_queues(options["queues"], options["jobs"])
        self.results["figures"]["jobs"] = [asdict(row) for row in spreads]
        write(f"  one transaction enqueueing {options['jobs']:,} jobs over K queues")
        write(f"  {'K':>8}{'statements/call':>18}{'WAL bytes/call':>18}{'WAL bytes/job':>16}")
        for spread in spreads:
            write(
                f"  {spread.queues:>8,}{spread.statements_per_call:>18.1f}"
                f"{number(spread.wal_bytes_per_call):>18}{number(spread.wal_bytes_per_job):>16}"
            )

    def workflows(self, options: dict[str, Any]) -> None:
        from outbox_bench import workflows

        write = self.stdout.write
        write(
            f"outbox_bench workflows, {connection.vendor}: {options['processes']} runworker "
            f"processes x {options['concurrency']} threads, medians of {options['rounds']} "
            "interleaved rounds"
        )
        found = workflows.run(
            jobs=options["jobs"],
            chain=options["chain"],
            rounds=options["rounds"],
            processes=options["processes"],
            concurrency=options["concurrency"],
        )
        self.results["figures"]["shapes"] = [asdict(f) for f in found]
        plain = found[0].drain_per_s
        write(
            f"  {'shape':<8}{'jobs':>8}{'enqueue s':>11}{'drain jobs/s':>14}{'of plain':>10}"
            f"{'stmts/job':>11}{'callback wait':>15}{'ms/step':>9}"
        )
        for f in found:
            wait = "-" if f.callback_wait_ms is None else f"{f.callback_wait_ms:.0f} ms"
            per_job = "-" if f.statements_per_job is None else f"{f.statements_per_job:.2f}"
            step = "-" if f.ms_per_step is None else f"{f.ms_per_step:.1f}"
            ratio = "-" if f.shape == "chain" else f"{f.drain_per_s / plain:.0%}"
            write(
                f"  {f.shape:<8}{f.jobs:>8,}{f.enqueue_seconds:>11.2f}{f.drain_per_s:>14,.0f}"
                f"{ratio:>10}{per_job:>11}{wait:>15}{step:>9}"
            )

    def bulk(self, options: dict[str, Any]) -> None:
        from outbox_bench import bulk

        if options["jobs"] % options["endpoints"]:
            raise CommandError(
                f"--jobs ({options['jobs']:,}) must be a multiple of --endpoints "
                f"({options['endpoints']:,}): each send writes one delivery job per endpoint"
            )
        write = self.stdout.write
        write(
            f"outbox_bench bulk, {connection.vendor}: {options['jobs']:,} jobs a writer, each in "
            f"one transaction; webhook sends to {options['endpoints']:,} endpoints each; "
            f"medians of {options['rounds']} interleaved rounds"
        )
        figures = bulk.run(
            jobs=options["jobs"],
            rounds=options["rounds"],
            endpoints=options["endpoints"],
            queue=options["queue"],
        )
        self.results["figures"]["bulk"] = [asdict(f) for f in figures]
        write(
            f"  {'writer':<14}{'jobs/s':>10}{'plain/s':>10}{'of plain':>10}"
            f"{'same/s':>10}{'of same':>10}"
        )
        for f in figures:
            write(
                f"  {f.writer:<14}{f.per_s:>10,.0f}{f.plain_per_s:>10,.0f}{f.of_plain:>10.0%}"
                f"{f.same_work_per_s:>10,.0f}{f.of_same_work:>10.0%}"
            )
        write(f"  plain: {figures[0].plain_insert} of rows of the same columns (the job rows)")
        write(f"  same: {figures[0].plain_insert} of every row the writer writes")

    def depth(self, options: dict[str, Any]) -> None:
        from outbox_bench import depth

        if options["finished"] < 0:
            raise CommandError("--finished must be 0 or more")
        write = self.stdout.write
        write(
            f"outbox_bench depth, {connection.vendor}: {options['processes']} runworker "
            f"processes x {options['concurrency']} threads, the empty table vacuumed "
            "(PostgreSQL) or purged (InnoDB) before each timed phase, "
            f"{options['finished']:,} finished jobs kept, {options['logging']} logging, medians "
            f"of {options['rounds']} interleaved rounds"
        )
        figures = depth.run(
            sizes=options["sizes"],
            rounds=options["rounds"],
            processes=options["processes"],
            concurrency=options["concurrency"],
            queue=options["queue"],
            finished=options["finished"],
            worker_dir=options["worker_dir"],
            with_ceiling=not options["no_ceiling"],
            logging=options["logging"],
        )
        self.results["figures"]["depth"] = [asdict(f) for f in figures]
        first = figures[0]
        write(
            f"  {'queued':>10}{'enqueue/s':>11}{'plain/s':>10}{'of plain':>9}{'drain/s':>10}"
            f"{'of first':>9}{'stmts/job':>10}{'WAL B/job':>10}{'ceiling/s':>10}{'of ceil':>8}"
        )
        for f in figures:
            stmts = "-" if f.statements_per_job is None else f"{f.statements_per_job:.3f}"
            wal = "-" if f.wal_bytes_per_job is None else f"{f.wal_bytes_per_job:,.0f}"
            ceil = "-" if f.ceiling_per_s is None else f"{f.ceiling_per_s:,.0f}"
            of_ceiling = (
                "-" if f.ceiling_per_s is None else f"{f.drain_per_s / f.ceiling_per_s:.0%}"
            )
            write(
                f"  {f.jobs:>10,}{f.enqueue_per_s:>11,.0f}{f.plain_insert_per_s:>10,.0f}"
                f"{f.enqueue_per_s / f.plain_insert_per_s:>9.0%}{f.drain_per_s:>10,.0f}"
                f"{f.drain_per_s / first.drain_per_s:>9.0%}{stmts:>10}{wal:>10}{ceil:>10}"
                f"{of_ceiling:>8}"
            )
        write(f"  plain: {first.plain_insert} of rows of the same columns, in one transaction")

    def keys(self, options: dict[str, Any]) -> None:
        from outbox_bench import keys

        write = self.stdout.write
        write(
            f"outbox_bench keys, {connection.vendor}: {options['jobs']:,} jobs over "
            f"{options['keys']:,} keys (concurrency_limit=1) against the same jobs without keys; "
            f"{options['processes']} runworker processes x {options['concurrency']} threads, "
            f"medians of {options['rounds']} interleaved rounds"
        )
        drained = keys.drain(
            jobs=options["jobs"],
            keys=options["keys"],
            rounds=options["rounds"],
            processes=options["processes"],
            concurrency=options["concurrency"],
        )
        self.results["figures"]["drain"] = [asdict(f) for f in drained]
        unkeyed = drained[0].drain_per_s
        header = f"{'shape':<9}{'enqueue s':>11}{'drain jobs/s':>14}{'of unkeyed':>12}"
        write(f"  {header}{'stmts/job':>11}")
        for f in drained:
            per_job = "-" if f.statements_per_job is None else f"{f.statements_per_job:.3f}"
            write(
                f"  {f.shape:<9}{f.enqueue_seconds:>11.2f}{f.drain_per_s:>14,.0f}"
                f"{f.drain_per_s / unkeyed:>12.0%}{per_job:>11}"
            )
        write(
            f"claims of {options['others']:,} other jobs, {options['batch']} at a time, with and "
            f"without {options['stuck']:,} jobs held behind one busy key"
        )
        claims = keys.claims_behind_a_busy_key(
            stuck=options["stuck"],
            others=options["others"],
            batch=options["batch"],
            rounds=options["rounds"],
        )
        self.results["figures"]["claims"] = [asdict(c) for c in claims]
        write(f"  {'other rows':<18}{'claims':>8}{'stmts/claim':>13}{'ms/claim':>10}")
        for c in claims:
            rows = "none" if c.rows == "none" else f"{c.stuck:,} {c.rows}"
            write(
                f"  {rows:<18}{c.claims:>8}{c.statements_per_claim:>13.2f}{c.ms_per_claim:>10.2f}"
            )

    def retry_storm(self, options: dict[str, Any]) -> None:
        from outbox_bench.storm import storm

        self.stdout.write(
            f"outbox_bench retry-storm, {connection.vendor}: {options['jobs']} jobs want one row "
            f"for {options['hold_ms']} ms each; one worker of {options['concurrency']} threads"
        )
        header = f"{'backoff':<14}{'succeeded':>10}{'runs':>8}{'median s':>10}{'max s':>8}"
        self.stdout.write(f"  {header}{'max / median':>14}")
        runs = storm(options["jobs"], options["hold_ms"], options["concurrency"], options["queue"])
        self.results["figures"]["backoffs"] = [
            asdict(f) | {"tail_ratio": f.tail_ratio} for f in runs
        ]
        for f in runs:
            self.stdout.write(
                f"  {f.backoff:<14}{f.succeeded:>10}{f.runs:>8}{f.median_s:>10.2f}{f.max_s:>8.2f}"
                f"{f.tail_ratio:>14.2f}"
            )

    def modes(self, options: dict[str, Any]) -> list[str]:
        available = wakeups.available_modes()
        asked = [m.strip() for m in options["modes"].split(",") if m.strip()] or available
        unknown = [m for m in asked if m not in available]
        if unknown:
            raise CommandError(
                f"wake mode(s) {', '.join(unknown)} not available here; "
                f"available: {', '.join(available)}"
            )
        return asked

    def latency(self, options: dict[str, Any]) -> None:
        if options["in_process"]:
            return self.latency_in_process(options)
        runworker_report.latency(self, options, self.modes(options))

    def latency_in_process(self, options: dict[str, Any]) -> None:
        """The measurement the figures up to 2026-12-03 were taken with: one worker on a
        thread of this process, pickup from the job's enqueued_at to its claim."""
        runworker_report.check_in_process(options)
        self.stdout.write(
            f"outbox_bench latency: {options['jobs']} jobs, {options['gap_ms']} ms apart, "
            f"one idle worker on a thread of this process (--in-process), {connection.vendor}"
        )
        columns = "".join(f"{name:>10}" for name in ("p50 ms", "p95 ms", "p99 ms", "max ms"))
        self.stdout.write(f"  {'wake / peer':<16}{columns}")
        for mode in self.modes(options):
            f = wakeups.latency(
                mode, jobs=options["jobs"], gap=options["gap_ms"] / 1000, queue=options["queue"]
            )
            self.results["figures"].setdefault("modes", []).append(asdict(f))
            cells = "".join(f"{v:>10.1f}" for v in (f.p50_ms, f.p95_ms, f.p99_ms, f.max_ms))
            self.stdout.write(f"  {f.mode:<16}{cells}")
        for name, p in self.peer_rows(options, "latency"):
            if isinstance(p, str):
                cells = p
            else:
                cells = "".join(f"{v:>10.1f}" for v in (p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms))
            self.stdout.write(f"  {name:<16}{cells}")

    def limited(self, options: dict[str, Any]) -> None:
        runworker_report.limited(self, options, self.modes(options) if options["modes"] else [])

    def idle(self, options: dict[str, Any]) -> None:
        self.stdout.write(
            f"outbox_bench idle: {options['workers']} idle workers for {options['seconds']} s, "
            f"{connection.vendor}"
        )
        columns = f"{'statements/s per worker':>26}{'db commits/s per worker':>26}"
        if options["peers"]:
            columns += f"{'Redis commands/s per worker':>30}"
        self.stdout.write(f"  {'wake / peer':<16}{columns}")
        for mode in self.modes(options):
            f = wakeups.idle(
                mode, workers=options["workers"], seconds=options["seconds"], queue=options["queue"]
            )
            self.results["figures"].setdefault("modes", []).append(asdict(f))
            commits = "-" if f.commits_per_worker_s is None else f"{f.commits_per_worker_s:.3f}"
            self.stdout.write(f"  {f.mode:<16}{f.statements_per_worker_s:>26.3f}{commits:>26}")
        for name, p in self.peer_rows(options, "idle"):
            if isinstance(p, str):
                self.stdout.write(f"  {name:<16}{p}")
                continue
            # Peers are counted by the server: PostgreSQL's commits, or Redis's commands.
            value = f"{p.per_worker_s:.3f}"
            cells = f"{value:>26}{'-':>30}" if p.unit == "transactions" else f"{'-':>26}{value:>30}"
            self.stdout.write(f"  {name:<16}{'-':>26}{cells}")

    def webhooks(self, options: dict[str, Any]) -> None:
        from outbox_bench import webhooks

        write = self.stdout.write
        write(f"outbox_bench webhooks, {connection.vendor}")
        if options["forked"] and options["worker_dir"] is not None:
            raise CommandError(
                "--worker-dir names the checkout that starts runworker processes; --forked "
                "forks this process's own workers instead: use one or the other"
            )
        if "throughput" in options["parts"] or "ceiling" in options["parts"]:
            self.webhook_rounds(options)
        if "retries" in options["parts"]:
            r = webhooks.retry_burst(options["retries"], options["concurrency"], options["fan_out"])
            self.results["figures"]["retries"] = asdict(r) | {
                "lookups_per_retry": r.lookups_per_retry
            }
            write(
                f"  retry burst: {r.deliveries:,} deliveries failing once: {r.attempts:,} "
                f"attempts, {r.retries:,} retries; first attempts loaded in "
                f"{r.first_load_batches:,} batches (no lookup), retries in "
                f"{r.retry_lookup_batches:,} batches ({r.lookup_queries:,} lookup queries): "
                f"{r.lookups_per_retry:.3f} lookup queries per retry ({r.seconds:.1f} s)"
            )
        if "fanout" in options["parts"]:
            write(f"  {'endpoints':>10}{'statements/send':>18}{'WAL bytes/send':>18}")
            sweep = webhooks.fan_out(options["sizes"])
            self.results["figures"]["fanout"] = [asdict(row) for row in sweep]
            for row in sweep:
                wal = "-" if row.wal_bytes_per_send is None else f"{row.wal_bytes_per_send:,.0f}"
                write(f"  {row.endpoints:>10,}{row.statements_per_send:>18.1f}{wal:>18}")

    def webhook_rounds(self, options: dict[str, Any]) -> None:
        """The throughput and the plain-HTTP ceilings, interleaved ``--rounds`` times; with
        both, each ceiling's ratio to the throughput (medians)."""
        from outbox_bench import http_ceiling, webhooks

        write = self.stdout.write
        shape = (options["deliveries"], options["processes"], options["concurrency"])
        fan_out = options["fan_out"]
        ours: list[Any] = []
        ceilings: dict[str, list[Any]] = {client: [] for client in http_ceiling.CLIENTS}
        for number in range(1, options["rounds"] + 1):
            if options["rounds"] > 1:
                write(f"  round {number}")
            if "throughput" in options["parts"]:
                t = webhooks.throughput(
                    *shape, fan_out, forked=options["forked"], worker_dir=options["worker_dir"]
                )
                ours.append(t)
                statements = cpu = "unknown"
                if t.loop_statements_per_delivery is not None:
                    statements = f"{t.loop_statements_per_delivery:.3f}"
                if t.worker_cpu_ms_per_delivery is not None:
                    cpu = f"{t.worker_cpu_ms_per_delivery:.3f}"
                write(
                    f"  throughput: {t.deliveries:,} deliveries ({fan_out} endpoints per "
                    f"message), {shape[1]} {t.workers} processes x {shape[2]} threads: "
                    f"{t.per_s:,.0f} deliveries/s ({t.seconds:.2f} s; {t.succeeded:,} "
                    f"succeeded, {t.requests:,} requests received; {statements} worker-loop "
                    f"statements and {cpu} ms of worker CPU per delivery)"
                )
                write(
                    f"    by the attempt log: {t.attempts_per_s:,.0f} deliveries/s from the "
                    f"first attempt's start to the last one's answer ({t.attempts_seconds:.2f} s)"
                )
            if "ceiling" in options["parts"]:
                for client, runs in ceilings.items():
                    c = webhooks.ceiling(*shape, fan_out, client=client)
                    runs.append(c)
                    f = c.figures
                    how = (
                        "httpx's connection pools (httpcore)"
                        if client == "httpcore"
                        else "an httpx.Client each"
                    )
                    write(
                        f"  plain-HTTP ceiling ({client}): the same {f.deliveries:,} signed "
                        f"POSTs to the same receiver, {f.processes} processes x {f.threads} "
                        f"threads of {how}, nothing else: {f.per_s:,.0f} deliveries/s "
                        f"({f.seconds:.2f} s from the first request to the last answer; "
                        f"{f.succeeded:,} answered 2xx, {c.requests:,} requests received; "
                        f"{f.cpu_ms_per_delivery:.3f} ms of CPU per delivery)"
                    )
        figures = self.results["figures"]
        if ours:
            middle = sorted(ours, key=lambda t: t.attempts_per_s)[len(ours) // 2]
            figures["throughput"] = asdict(middle)
            figures["throughput_rounds"] = [asdict(t) for t in ours]
        for client, runs in ceilings.items():
            if not runs:
                continue
            key = "ceiling" if client == "httpcore" else f"ceiling_{client}"
            middle = sorted(runs, key=lambda c: c.figures.per_s)[len(runs) // 2]
            figures[key] = asdict(middle.figures) | {"requests": middle.requests}
            figures[f"{key}_rounds"] = [asdict(c.figures) for c in runs]
            if ours:
                ratio = statistics.median(t.attempts_per_s for t in ours) / statistics.median(
                    c.figures.per_s for c in runs
                )
                figures[key]["ratio"] = ratio
                each = ", ".join(
                    f"{t.attempts_per_s / c.figures.per_s:.0%}"
                    for t, c in zip(ours, runs, strict=True)
                )
                write(
                    f"  django_outbox / plain-HTTP ceiling ({client}): {ratio:.0%} (medians of "
                    f"{len(runs)} round(s), both from the first request to the last answer; "
                    f"each round: {each})"
                )


WEBHOOK_PARTS = ("throughput", "ceiling", "retries", "fanout")

#: Options every command has, or that say where the figures go: not the workload's shape.
_NOT_WORKLOAD_OPTIONS = {
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
    "json",
    "plot",
    "workload",
}


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def size_list(text: str) -> list[int]:
    return whole_numbers(text, "numbers", "sizes must be whole numbers of at least 1")


def part_list(text: str) -> list[str]:
    return names(text, WEBHOOK_PARTS, "parts")


def settle_seconds(text: str) -> float:
    value = seconds_arg(text)
    if value > 600:
        raise argparse.ArgumentTypeError(f"must be at most 600 seconds, got {text}")
    return value


def checkout_dir(text: str) -> Path:
    """``drain --worker-dir``: a directory with a manage.py."""
    try:
        return check_worker_dir(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: The peers' names, for --peer-names (all_peers() imports nothing of theirs).
PEER_NAMES = ("django-tasks-db", "procrastinate", "pgqueuer", "celery")


def peer_names(text: str) -> list[str]:
    return names(text, PEER_NAMES, "peers")
