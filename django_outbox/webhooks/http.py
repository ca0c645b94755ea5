"""One webhook request: one shared httpx client per process, the SSRF guard on every
connection, timeouts, no redirects, and only the first 4 KiB of the response kept."""

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
_client: httpx.Client | None = None
_client_pid = 0
_per_endpoint: defaultdict[int, threading.BoundedSemaphore] = defaultdict(
    lambda: threading.BoundedSemaphore(conf.get().WEBHOOKS.MAX_PER_ENDPOINT)
)


def client() -> httpx.Client:
    """This process's client (a forked child builds its own)."""
    global _client, _client_pid
    with _lock:
        if _client is None or _client_pid != os.getpid():
            options = conf.get().WEBHOOKS
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
            _client = httpx.Client(
                transport=GuardedTransport(limits),
                follow_redirects=False,
                trust_env=False,
                headers={"user-agent": options.USER_AGENT, "accept-encoding": "identity"},
            )
            _client_pid = os.getpid()
        return _client


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
    sent_headers = {**headers, "content-type": "application/json"}
    try:
        with client().stream(
            "POST", url, content=body, headers=sent_headers, timeout=limits
        ) as answer:
            response.status_code = answer.status_code
            response.headers = _kept_headers(answer.headers)
            response.body = _read_start(answer, deadline)
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


def _read_start(answer: httpx.Response, deadline: float) -> str:
    """The first BODY_LIMIT bytes, as text that any database can store."""
    kept = bytearray()
    try:
        for chunk in answer.iter_raw():
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
