"""A small, fast webhook receiver for the benchmark and the demo, in a process of its own.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies) to answer as fast as a
real receiver would, so the benchmark measures the sender. It can fail the first requests
of each delivery (a ``webhook-id`` at one path) with a 500, to show retries.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
FAIL = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nfail"


@dataclass
class ReceiverProcess:
    """A receiver running in a child process; ``stop()`` returns how many it answered."""

    port: int
    process: Any
    counts: Any

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stop(self) -> dict[str, int]:
        self.process.terminate()
        self.process.join(5)
        return {"requests": self.counts[0], "failed": self.counts[1]}


def start(fail_first: int = 0) -> ReceiverProcess:
    """Start a receiver on a free port of 127.0.0.1; it fails the first ``fail_first``
    requests of each message."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    # spawn, not fork: the caller has threads (workers, their pools), which fork does not copy well.
    context = multiprocessing.get_context("spawn")
    counts = context.Array("q", 2)  # requests, failed
    process = context.Process(target=_serve, args=(sock, fail_first, counts), daemon=True)
    process.start()
    port = sock.getsockname()[1]
    sock.close()  # the child holds its own copy
    return ReceiverProcess(port, process, counts)


def _serve(sock: socket.socket, fail_first: int, counts: Any) -> None:
    seen: Counter[bytes] = Counter()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                length, message_id = 0, lines[0]  # the request line holds the path
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"webhook-id":
                        message_id += value.strip()
                await reader.readexactly(length)
                seen[message_id] += 1
                failing = seen[message_id] <= fail_first
                with counts.get_lock():
                    counts[0] += 1
                    counts[1] += failing
                writer.write(FAIL if failing else OK)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
