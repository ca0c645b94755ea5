"""The plain-HTTP ceiling of ``outbox_bench webhooks``: the fastest these processes and
threads can POST signed webhooks to the same local receiver, for comparison.

No Django, no database: ``processes`` spawned processes of ``threads`` threads, each thread
with its own keep-alive connection pool of httpx's (httpcore's, which django_outbox sends
its requests through too), POSTing its share of the deliveries: the same JSON envelope
``webhooks.send()`` writes (``{"type", "timestamp", "data"}``) to the same endpoint paths,
with the same headers, each request signed as Standard Webhooks asks (an HMAC-SHA256 of
``"{id}.{timestamp}.{body}"`` with the endpoint's secret, at the time it is sent). Nothing
else: what django_outbox's delivery adds (claims, loads, attempt logs, retries' policy,
the SSRF guard) is the difference.

Two clients: ``httpcore`` (the default: the connection pool under httpx, as the delivery
uses it, the leanest way to send with httpx), and ``httpx``, an ``httpx.Client`` per
thread (how issue #18 defined the ceiling, and how a hand-written sender usually looks).

Timed from the first request sent to the last answer read, over all threads. Kept apart
from ``webhooks`` (which needs Django) so that its spawned children import nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import multiprocessing
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class HttpCeiling:
    deliveries: int
    processes: int
    threads: int
    #: From the first request sent to the last answer read.
    seconds: float
    per_s: float
    #: Requests answered 2xx.
    succeeded: int
    #: CPU time of the sending processes (all their threads), per delivery.
    cpu_ms_per_delivery: float
    #: "httpcore" or "httpx" (see the module's docstring).
    client: str = "httpcore"


CLIENTS = ("httpcore", "httpx")


def run(
    url: str, deliveries: int, fan_out: int, processes: int, threads: int, client: str = "httpcore"
) -> HttpCeiling:
    """POST ``deliveries`` signed bodies, message after message each to ``fan_out``
    endpoints (``url/0`` … ``url/<fan_out - 1>``), from ``processes`` x ``threads``, with
    ``client`` (one of CLIENTS)."""
    if client not in CLIENTS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}, not {client!r}")
    context = multiprocessing.get_context("spawn")
    slots = processes * threads
    firsts: Any = context.Array("d", slots)
    lasts: Any = context.Array("d", slots)
    succeeded: Any = context.Value("q", 0)
    cpu: Any = context.Value("d", 0.0)
    ready: Any = context.Barrier(slots)
    secrets_ = [secrets.token_bytes(32) for _ in range(fan_out)]
    children = [
        context.Process(
            target=_process,
            args=(url, deliveries, fan_out, secrets_, number, processes, threads, client),
            kwargs={
                "firsts": firsts,
                "lasts": lasts,
                "succeeded": succeeded,
                "cpu": cpu,
                "ready": ready,
            },
        )
        for number in range(processes)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join()
    if any(child.exitcode for child in children):
        raise RuntimeError("a plain-HTTP ceiling process failed (its traceback is above)")
    seconds = max(max(lasts[:]) - min(firsts[:]), 1e-6)
    return HttpCeiling(
        deliveries=deliveries,
        processes=processes,
        threads=threads,
        seconds=seconds,
        per_s=deliveries / seconds,
        succeeded=succeeded.value,
        cpu_ms_per_delivery=cpu.value * 1000 / deliveries,
        client=client,
    )


def envelope(number: int) -> bytes:
    """The body ``webhooks.send("bench.event", {"n": number})`` stores and sends."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    return json.dumps(
        {"type": "bench.event", "timestamp": stamp, "data": {"n": number}},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def _process(
    url: str,
    deliveries: int,
    fan_out: int,
    secrets_: list[bytes],
    number: int,
    processes: int,
    threads: int,
    client: str,
    *,
    firsts: Any,
    lasts: Any,
    succeeded: Any,
    cpu: Any,
    ready: Any,
) -> None:
    slots = processes * threads
    workers = []
    for thread in range(threads):
        slot = number * threads + thread
        # Its share: every slots-th delivery. The bodies exist before the clock starts, as
        # messages do before a worker delivers them.
        mine = [
            (index % fan_out, f"msg_bench{index // fan_out}", envelope(index // fan_out))
            for index in range(slot, deliveries, slots)
        ]
        workers.append(
            threading.Thread(
                target=_send,
                args=(url, mine, secrets_, client, slot, firsts, lasts, succeeded, ready),
            )
        )
    started = time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    with cpu.get_lock():
        cpu.value += time.process_time() - started


def _send(
    url: str,
    mine: list[tuple[int, str, bytes]],
    secrets_: list[bytes],
    client: str,
    slot: int,
    firsts: Any,
    lasts: Any,
    succeeded: Any,
    ready: Any,
) -> None:
    """One thread: sign and POST its share with ``client``, each request signed when sent."""
    ok = 0
    with _poster(url, len(secrets_), client) as post:
        ready.wait()
        first = time.time()
        for endpoint, msg_id, body in mine:
            timestamp = str(int(time.time()))
            digest = hmac.new(
                secrets_[endpoint], f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256
            ).digest()
            status = post(endpoint, msg_id, timestamp, b"v1," + base64.b64encode(digest), body)
            ok += 200 <= status < 300
        last = time.time()
    firsts[slot], lasts[slot] = first, last
    with succeeded.get_lock():
        succeeded.value += ok


#: POST one signed body: (endpoint, webhook-id, webhook-timestamp, signature, body) -> status.
Post = Callable[[int, str, str, bytes, bytes], int]


@contextmanager
def _poster(url: str, endpoints: int, client: str) -> Iterator[Post]:
    """A thread's sender: its own keep-alive httpcore pool, or its own ``httpx.Client``."""
    if client == "httpcore":
        import httpcore

        host = url.split("//", 1)[1].split("/", 1)[0].encode()
        raw_urls = [f"{url}/{endpoint}".encode() for endpoint in range(endpoints)]
        fixed = [
            (b"host", host),
            (b"user-agent", b"django-outbox-bench"),
            (b"accept", b"*/*"),
            (b"accept-encoding", b"identity"),
        ]
        with httpcore.ConnectionPool(max_connections=1) as pool:

            def post_raw(endpoint: int, msg_id: str, stamp: str, sig: bytes, body: bytes) -> int:
                answer = pool.request(
                    b"POST",
                    raw_urls[endpoint],
                    headers=[
                        *fixed,
                        (b"webhook-id", msg_id.encode()),
                        (b"webhook-timestamp", stamp.encode()),
                        (b"webhook-signature", sig),
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                    content=body,
                )
                return answer.status

            yield post_raw
        return
    import httpx

    urls = [f"{url}/{endpoint}" for endpoint in range(endpoints)]
    with httpx.Client(headers={"user-agent": "django-outbox-bench"}) as http:

        def post(endpoint: int, msg_id: str, stamp: str, sig: bytes, body: bytes) -> int:
            answer = http.post(
                urls[endpoint],
                content=body,
                headers={
                    "webhook-id": msg_id,
                    "webhook-timestamp": stamp,
                    "webhook-signature": sig.decode(),
                    "content-type": "application/json",
                },
            )
            return answer.status_code

        yield post
