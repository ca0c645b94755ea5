"""One webhook request: a connection pool per worker thread, the SSRF guard on every
connection, timeouts, no redirects, no cookies, and only the first 4 KiB of the response
kept.

Requests go straight to httpx's connection pool (httpcore, the engine under httpx), not
through an ``httpx.Client``, nor through ``httpx.Request`` and ``httpx.Response``:

- a webhook needs none of the client's layers, and one of them is wrong here. A shared
  client keeps the cookies receivers set and sends them on to the next request to the
  same host, which may be another tenant's endpoint;
- each layer costs CPU, and a worker process's CPU is what bounds how many deliveries it
  sends per second. In isolation, a request through ``httpx.Request`` and the transport
  cost 529 µs of CPU, and 398 µs through the pool directly.

URLs are still parsed by httpx (IDNA hosts, validation), once per endpoint URL.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import httpcore
import httpx
from django.utils import timezone

from django_outbox import conf
from django_outbox.exceptions import UnsafeDestination
from django_outbox.lib import text
from django_outbox.webhooks.guard import guarded_pool

#: Bytes of a response body kept for the attempt log; the rest is never read.
BODY_LIMIT = 4096
MAX_HEADERS = 50
MAX_HEADER_VALUE = 1024


@dataclass(slots=True)
class Response:
    """What one attempt came to, ready for the attempt log."""

    started_at: datetime
    duration: float = 0.0
    status_code: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    error_class: str = ""
    error_message: str = ""
    #: Another attempt cannot help (the URL itself is invalid).
    final: bool = False

    @property
    def retry_after(self) -> str | None:
        """The Retry-After header of a failed answer (a success has nothing to retry)."""
        if self.status_code is None or 200 <= self.status_code < 300:
            return None
        return self.headers.get("retry-after")

    @property
    def summary(self) -> str:
        if self.status_code is not None:
            return f"HTTP {self.status_code}"
        return f"{self.error_class}: {self.error_message}"


_lock = threading.Lock()
_context: Any = None
_context_pid = 0
_per_endpoint: defaultdict[int, threading.BoundedSemaphore] = defaultdict(
    lambda: threading.BoundedSemaphore(conf.get().WEBHOOKS.MAX_PER_ENDPOINT)
)

#: What httpcore raises for a request that failed on the way (its exceptions share no base).
_TRANSPORT_ERRORS = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ProxyError,
)


_local = threading.local()


def pool() -> httpcore.ConnectionPool:
    """This thread's connection pool (a forked child's threads build their own).

    One pool per thread, as an ``httpx.Client`` per thread would be: a pool shared by a
    worker's threads serialises every request's start and end on the pool's lock, and under
    the GIL each hand-over of that lock waits for the GIL too. With 32 threads that queue
    took more time than the requests; with 96, deliveries slowed to a few per second. A
    thread reuses its own connections to an endpoint's host; what TLS needs (its
    certificate store) is loaded once per process and shared."""
    pid = os.getpid()
    if getattr(_local, "pid", None) != pid:
        _local.pool = guarded_pool(_ssl_context())
        _local.pid = pid
    connections: httpcore.ConnectionPool = _local.pool
    return connections


def _ssl_context() -> Any:
    global _context, _context_pid
    with _lock:
        if _context is None or _context_pid != os.getpid():
            _context = httpx.create_ssl_context(trust_env=False)
            _context_pid = os.getpid()
        return _context


@lru_cache(maxsize=4096)
def _target(url: str) -> tuple[httpcore.URL, bytes]:
    """The URL as httpcore takes it, and its Host header, parsed by httpx once per URL."""
    parsed = httpx.URL(url)
    return (
        httpcore.URL(
            scheme=parsed.raw_scheme,
            host=parsed.raw_host,
            port=parsed.port,
            target=parsed.raw_path,
        ),
        parsed.netloc,
    )


def endpoint_slot(endpoint_id: int) -> threading.BoundedSemaphore:
    """Bounds the requests this process sends to one endpoint at once."""
    with _lock:
        return _per_endpoint[endpoint_id]


def post(
    url: str, body: bytes, headers: dict[str, str], timeout: float, connect_timeout: float
) -> Response:
    """POST ``body``; every failure becomes a Response that says what happened."""
    response = Response(started_at=timezone.now())
    began = time.monotonic()
    deadline = began + timeout
    connect = min(connect_timeout, timeout)
    try:
        target, host = _target(url)
        request = httpcore.Request(
            b"POST",
            target,
            headers=[
                (b"host", host),
                *_fixed_headers(),
                *[(name.encode(), value.encode()) for name, value in headers.items()],
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            content=body,
            extensions={
                "timeout": {"connect": connect, "read": timeout, "write": timeout, "pool": timeout}
            },
        )
        answer = pool().handle_request(request)
        try:
            response.status_code = answer.status
            response.headers = _kept_headers(answer.headers)
            response.body = _read_start(answer.stream, deadline)  # type: ignore[arg-type]
        finally:
            answer.close()
    except UnsafeDestination as exc:
        # Retried on the schedule, not failed for good: what the guard allows can change
        # (the settings, or what the host resolves to).
        response.error_class, response.error_message = "UnsafeDestination", str(exc)
    except httpcore.ConnectTimeout as exc:
        response.error_class = type(exc).__name__
        response.error_message = f"could not connect within {text.number(connect)} s ({exc})"
    except httpcore.TimeoutException as exc:
        response.error_class = type(exc).__name__
        response.error_message = f"no answer within {text.number(timeout)} s ({exc or 'timed out'})"
    except (httpx.InvalidURL, httpcore.UnsupportedProtocol) as exc:
        # The URL itself: no later attempt can send it.
        response.error_class, response.error_message = type(exc).__name__, str(exc) or repr(exc)
        response.final = True
    except _TRANSPORT_ERRORS as exc:
        response.error_class, response.error_message = type(exc).__name__, str(exc) or repr(exc)
    except OSError as exc:  # anything the transport did not wrap
        response.error_class, response.error_message = type(exc).__name__, str(exc)
    response.duration = time.monotonic() - began
    response.error_message = _clean(response.error_message)[:2000]
    return response


def _fixed_headers() -> list[tuple[bytes, bytes]]:
    return [
        (b"user-agent", conf.get().WEBHOOKS.USER_AGENT.encode()),
        (b"accept", b"*/*"),
        (b"accept-encoding", b"identity"),
    ]


def _read_start(stream: Iterable[bytes], deadline: float) -> str:
    """The first BODY_LIMIT bytes, as text that any database can store."""
    kept = bytearray()
    try:
        for chunk in stream:
            kept += chunk[: BODY_LIMIT - len(kept)]
            if len(kept) >= BODY_LIMIT or time.monotonic() >= deadline:
                break
    except (*_TRANSPORT_ERRORS, httpcore.TimeoutException):
        pass  # the status decided already; a body cut short is still worth keeping
    return _clean(kept.decode("utf-8", errors="replace"))


def _text(raw: bytes) -> str:
    """A header's bytes as text, decoded as httpx decodes them (UTF-8, else Latin-1)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _kept_headers(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    kept: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name, value = _clean(_text(raw_name).lower())[:200], _clean(_text(raw_value))
        if name in kept:  # a repeated header is one, its values joined (as httpx shows it)
            value = f"{kept[name]}, {value}"
        elif len(kept) >= MAX_HEADERS:
            break
        kept[name] = value[:MAX_HEADER_VALUE]
    return kept


def _clean(text: str) -> str:
    """No NUL (PostgreSQL text holds none) and no lone surrogate."""
    return text.replace("\x00", "\\x00").encode("utf-8", errors="replace").decode("utf-8")
