"""No signals: wait out the timeout (the worker then looks for work itself)."""

from __future__ import annotations

from django_outbox.wake.base import Wake, Waker


class PollingWaker(Waker):
    name = "poll"

    def wait(self, timeout: float) -> Wake:
        self.stop.wait(max(0.0, timeout))
        return Wake()
