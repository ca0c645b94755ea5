"""What a worker counts while it runs; reported when it stops (and by the benchmarks)."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    failed: int = 0
    released: int = 0
    #: Runs a rate limit held back (queued again, not counted as attempts).
    held: int = 0
    lost: int = 0
    rescued: int = 0
    statements: int = 0
    started: float = field(default_factory=time.monotonic)
    #: CPU time of the whole process (every thread) when the worker started.
    cpu_started: float = field(default_factory=time.process_time)

    @property
    def finished(self) -> int:
        return self.succeeded + self.retried + self.failed

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__} | {
            "seconds": round(time.monotonic() - self.started, 3),
            "cpu_seconds": round(time.process_time() - self.cpu_started, 3),
            # Peak resident memory of the process so far (Linux reports kilobytes).
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }
