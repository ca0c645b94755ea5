"""A rate limit's numbers (no Django import: settings and stores share it)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rate:
    """``per_second`` on average, and at most ``burst`` at once after a quiet spell."""

    per_second: float
    burst: int

    @classmethod
    def of(cls, per_second: float, burst: int | None = None) -> Rate:
        """A rate whose burst defaults to one second's worth (at least 1)."""
        return cls(float(per_second), burst if burst is not None else max(1, math.ceil(per_second)))

    @property
    def interval(self) -> float:
        """Seconds per token."""
        return 1.0 / self.per_second

    @property
    def capacity(self) -> float:
        """Seconds of tokens a full bucket holds."""
        return self.burst * self.interval
