"""What a running task says of its progress (``context.progress()``): kept on its job row."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db import connections, router
from django.utils import timezone

from django_outbox.models import Job, JobStatus

#: The longest note kept; a longer one is cut, with an ellipsis.
NOTE_MAX = 200


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a job has come: ``done`` of ``total`` (None: not known), and a short note."""

    done: float
    total: float | None = None
    note: str = ""

    @property
    def fraction(self) -> float | None:
        """``done / total`` between 0 and 1, when the total is known."""
        if not self.total:
            return None
        return min(1.0, max(0.0, self.done / self.total))

    @property
    def amount(self) -> str:
        """'3 of 10', or '3' without a total."""
        total = f" of {_number(self.total)}" if self.total is not None else ""
        return f"{_number(self.done)}{total}"

    def __str__(self) -> str:
        return f"{self.amount} ({self.note})" if self.note else self.amount

    @classmethod
    def from_stored(cls, value: Any) -> Progress | None:
        if not isinstance(value, dict) or "done" not in value:
            return None
        return cls(value["done"], value.get("total"), value.get("note") or "")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def checked(done: Any, total: Any = None, note: Any = "") -> Progress:
    """The progress a task reports, or ValueError saying what is wrong with it."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"progress {name} must be a number, not {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"progress {name} must be a finite number of 0 or more, not {value}")
    if not isinstance(note, str):
        raise ValueError(f"a progress note must be a string, not {note!r}")
    if len(note) > NOTE_MAX:
        note = note[: NOTE_MAX - 1] + "…"
    return Progress(done, total, note)


def record(job_id: int, progress: Progress) -> bool:
    """Store ``progress`` on the job ``job_id`` while it runs; False if it no longer does,
    or if the task is inside a transaction of its own: written there, the report would hold
    the job's row (and the worker's heartbeat behind it) until that transaction ends."""
    using = router.db_for_write(Job)
    if connections[using].in_atomic_block:
        return False
    stored = {"done": progress.done, "total": progress.total, "note": progress.note}
    stored["at"] = timezone.now().isoformat()
    changed = (
        Job.objects.using(using).filter(id=job_id, status=JobStatus.RUNNING).update(progress=stored)
    )
    return bool(changed)
