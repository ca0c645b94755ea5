"""A worker's helper threads outlive a failed round."""

from __future__ import annotations

import threading

from django_outbox.worker import background


class Flaky(background.BackgroundThread):
    name = "flaky"

    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0
        self.second = threading.Event()

    def round(self) -> float:
        self.rounds += 1
        if self.rounds == 1:
            raise ValueError("a bad schedule")
        self.second.set()
        return 60.0


def test_a_round_that_raises_is_logged_and_tried_again(monkeypatch, caplog):
    monkeypatch.setattr(background, "RETRY", 0.05)
    thread = Flaky()
    thread.start()
    try:
        assert thread.second.wait(5)
    finally:
        thread.stop()
    assert "flaky failed (the traceback follows)" in caplog.text and "a bad schedule" in caplog.text
