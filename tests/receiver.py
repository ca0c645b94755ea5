"""A real webhook receiver for the tests: an HTTP server on 127.0.0.1 in a thread.

It records every request and answers from a script (status, headers, body, delays), so a
test can say "fail twice, then succeed" and see exactly what arrived.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    #: Seconds before the status line is sent.
    delay: float = 0.0
    #: Send the body in this many pieces, this many seconds apart.
    pieces: int = 1
    piece_delay: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    started: float
    finished: float = 0.0
    #: The status it was answered with.
    status: int = 0


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.scripts: dict[str, list[Answer]] = {}
        #: Chooses the answer to a request from what arrived (None: the script's answer).
        self.decide: Callable[[Received], Answer | None] | None = None
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                began = time.monotonic()
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                headers = {name.lower(): value for name, value in self.headers.items()}
                record = Received(self.path, headers, body, began)
                with receiver._lock:
                    receiver.received.append(record)
                    script = receiver.scripts.get(self.path, [])
                    answer = script.pop(0) if len(script) > 1 else (script or [Answer()])[0]
                    if receiver.decide is not None:
                        answer = receiver.decide(record) or answer
                    record.status = answer.status
                try:
                    time.sleep(answer.delay)
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(answer.body)))
                    self.end_headers()
                    size = max(1, len(answer.body) // answer.pieces)
                    starts = range(0, len(answer.body), size)
                    for start in starts:
                        if start == starts[-1]:
                            # Before the last byte leaves: once it has, the client may
                            # send its next request before this thread runs again.
                            record.finished = time.monotonic()
                        self.wfile.write(answer.body[start : start + size])
                        self.wfile.flush()
                        time.sleep(answer.piece_delay)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up: that is what the test is about
                record.finished = record.finished or time.monotonic()

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # many workers' threads connect at once

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, *answers: Answer) -> None:
        """Answer requests to ``path`` in this order; the last answer repeats."""
        with self._lock:
            self.scripts[path] = list(answers)

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
