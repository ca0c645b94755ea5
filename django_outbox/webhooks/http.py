"""One webhook request: one shared httpx connection pool per process, the SSRF guard on
every connection, timeouts, no redirects, no cookies, and only the first 4 KiB of the
response kept.

Requests go straight to the pool (``httpx.HTTPTransport``), not through an
``httpx.Client``: a webhook needs none of the client's layers, and one of them is wrong
here. A shared client keeps the cookies receivers set and sends them on to the next
request to the same host, which may be another tenant's endpoint. Skipping the client's
cookie, auth, redirect and event-hook layers also halves the CPU a request costs (the
difference decides how many deliveries a worker process sends per second).
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import httpx
from django.utils import timezone

from django_outbox import conf
from django_outbox.exceptions import UnsafeDestination
from django_outbox.webhooks.guard import GuardedTransport

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
    #: Another attempt cannot help (a refused destination).
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
_pool: httpx.HTTPTransport | None = None
_pool_pid = 0
_per_endpoint: defaultdict[int, threading.BoundedSemaphore] = defaultdict(
    lambda: threading.BoundedSemaphore(conf.get().WEBHOOKS.MAX_PER_ENDPOINT)
)


def pool() -> httpx.HTTPTransport:
    """This process's connection pool (a forked child builds its own)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
            _pool = GuardedTransport(limits)
            _pool_pid = os.getpid()
        return _pool


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
    limits = httpx.Timeout(timeout, connect=min(connect_timeout, timeout))
    try:
        request = httpx.Request(
            "POST",
            url,
            content=body,
            headers={**_fixed_headers(), **headers, "content-type": "application/json"},
            extensions={"timeout": limits.as_dict()},
        )
        answer = pool().handle_request(request)
        try:
            response.status_code = answer.status_code
            response.headers = _kept_headers(answer.headers)
            response.body = _read_start(answer, deadline)
        finally:
            answer.close()
    except UnsafeDestination as exc:
        response.error_class, response.error_message = "UnsafeDestination", str(exc)
        response.final = True
    except httpx.ConnectTimeout as exc:
        response.error_class = type(exc).__name__
        response.error_message = f"could not connect within {limits.connect:g} s ({exc})"
    except httpx.TimeoutException as exc:
        response.error_class = type(exc).__name__
        response.error_message = f"no answer within {timeout:g} s ({exc or 'timed out'})"
    except httpx.HTTPError as exc:
        response.error_class, response.error_message = type(exc).__name__, str(exc) or repr(exc)
    except OSError as exc:  # anything the transport did not wrap
        response.error_class, response.error_message = type(exc).__name__, str(exc)
    response.duration = time.monotonic() - began
    response.error_message = _clean(response.error_message)[:2000]
    return response


def _fixed_headers() -> dict[str, str]:
    return {
        "user-agent": conf.get().WEBHOOKS.USER_AGENT,
        "accept": "*/*",
        "accept-encoding": "identity",
    }


def _read_start(answer: httpx.Response, deadline: float) -> str:
    """The first BODY_LIMIT bytes, as text that any database can store."""
    kept = bytearray()
    try:
        for chunk in answer.stream:  # type: ignore[union-attr]
            kept += chunk[: BODY_LIMIT - len(kept)]
            if len(kept) >= BODY_LIMIT or time.monotonic() >= deadline:
                break
    except httpx.HTTPError:
        pass  # the status decided already; a body cut short is still worth keeping
    return _clean(kept.decode("utf-8", errors="replace"))


def _kept_headers(headers: httpx.Headers) -> dict[str, str]:
    kept: dict[str, str] = {}
    for name, value in headers.items():
        if len(kept) >= MAX_HEADERS:
            break
        kept[_clean(name)[:200]] = _clean(value)[:MAX_HEADER_VALUE]
    return kept


def _clean(text: str) -> str:
    """No NUL (PostgreSQL text holds none) and no lone surrogate."""
    return text.replace("\x00", "\\x00").encode("utf-8", errors="replace").decode("utf-8")
