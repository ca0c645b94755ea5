"""The workflows benchmark: what a workflow costs against the same jobs without one.

In interleaved rounds, each drained by ``runworker --burst`` processes started as a user
starts them (``drain.run_runworker``), with the jobs enqueued from this process:

- **plain**: N no-op jobs, ``enqueue_many()``;
- **chord**: the same N no-op jobs as a chord's members, and one no-op callback;
- **chain**: a chain of ``chain`` no-op steps, each released by the one before it: what a
  hand-off from one step to the next costs.

Figures come from the job rows: the drain from the first job's start to the last one's
finish, the callback's wait from the last member's finish to its own start, and the
statements the workers report when they stop.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Min, Q

import django_outbox
from django_outbox import workflows
from django_outbox.models import Job, JobStatus, Workflow, WorkflowEdge, WorkflowStep
from django_outbox.worker.process import WorkerOptions
from outbox_bench.drain import DrainError, default_worker_dir, run_runworker


@dataclass(frozen=True, slots=True)
class Round:
    shape: str
    jobs: int
    enqueue_seconds: float
    drain_seconds: float
    #: The callback's start less the last member's finish (chord); None for the others.
    callback_wait_ms: float | None
    statements: int | None

    @property
    def drain_per_s(self) -> float:
        return self.jobs / self.drain_seconds if self.drain_seconds else 0.0


@dataclass(frozen=True, slots=True)
class Figures:
    shape: str
    jobs: int
    rounds: int
    enqueue_seconds: float
    drain_per_s: float
    callback_wait_ms: float | None
    statements_per_job: float | None
    #: Per step of a chain: its whole drain over its steps.
    ms_per_step: float | None


def _clear() -> None:
    from outbox_bench.tasks import noop

    WorkflowEdge.objects.all().delete()
    WorkflowStep.objects.all().delete()
    Workflow.objects.all().delete()
    Job.objects.filter(task_path=noop.module_path).delete()


def _enqueue(shape: str, jobs: int, chain: int, queue: str) -> tuple[int, float]:
    """Enqueue one round's jobs; returns how many and how long it took."""
    from outbox_bench.tasks import noop

    task = noop.using(queue_name=queue)
    started = time.perf_counter()
    if shape == "plain":
        django_outbox.enqueue_many(task, [((), {})] * jobs)
        count = jobs
    elif shape == "chord":
        members = [workflows.step(task) for _ in range(jobs)]
        workflows.chord(members, workflows.step(task).immutable()).enqueue("bench chord")
        count = jobs + 1
    else:
        steps = [workflows.step(task).immutable() for _ in range(chain)]
        workflows.chain(*steps).enqueue("bench chain")
        count = chain
    return count, time.perf_counter() - started


def _round(
    shape: str, jobs: int, chain: int, options: WorkerOptions, processes: int, worker_dir: Path
) -> Round:
    from outbox_bench.tasks import noop

    _clear()
    count, enqueue_seconds = _enqueue(shape, jobs, chain, options.queues[0])
    ran = run_runworker(options, processes, worker_dir, timeout=180 + count / 100)
    theirs = Job.objects.filter(task_path=noop.module_path)
    record = theirs.aggregate(
        first=Min("started_at"),
        last=Max("finished_at"),
        succeeded=Count("id", filter=Q(status=JobStatus.SUCCEEDED)),
    )
    if record["succeeded"] != count or record["first"] is None:
        raise DrainError(
            f"the {shape} round ran {record['succeeded']:,} of its {count:,} jobs: do the "
            f"workers use this database ({connection.settings_dict['NAME']})?"
        )
    wait = None
    if shape == "chord":
        callback = theirs.order_by("-id").first()  # the chord's last row: its callback
        assert callback is not None and callback.started_at is not None
        members = theirs.exclude(pk=callback.pk).aggregate(last=Max("finished_at"))
        wait = (callback.started_at - members["last"]).total_seconds() * 1000
    seconds = max((record["last"] - record["first"]).total_seconds(), 1e-6)
    _clear()
    return Round(shape, count, enqueue_seconds, seconds, wait, ran.statements)


def run(
    *,
    jobs: int,
    chain: int,
    rounds: int,
    processes: int,
    concurrency: int,
    queue: str = "default",
    worker_dir: Path | None = None,
) -> list[Figures]:
    """``rounds`` interleaved rounds of each shape; the medians of each."""
    options = WorkerOptions(queues=[queue], concurrency=concurrency, burst=True)
    directory = worker_dir or default_worker_dir()
    shapes = ["plain", "chord", "chain"]
    seen: dict[str, list[Round]] = {shape: [] for shape in shapes}
    try:
        for number in range(rounds):
            order = shapes if number % 2 == 0 else list(reversed(shapes))
            for shape in order:
                seen[shape].append(_round(shape, jobs, chain, options, processes, directory))
    finally:
        _clear()
    return [_medians(shape, found) for shape, found in seen.items()]


def _medians(shape: str, found: list[Round]) -> Figures:
    def median(values: list[Any]) -> Any:
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    per_job = [r.statements / r.jobs if r.statements is not None else None for r in found]
    drain = median([r.drain_seconds for r in found])
    return Figures(
        shape=shape,
        jobs=found[0].jobs,
        rounds=len(found),
        enqueue_seconds=median([r.enqueue_seconds for r in found]),
        drain_per_s=median([r.drain_per_s for r in found]),
        callback_wait_ms=median([r.callback_wait_ms for r in found]),
        statements_per_job=median(per_job),
        ms_per_step=drain * 1000 / found[0].jobs if shape == "chain" else None,
    )
