"""The SSRF guard: webhooks go to public addresses only, unless the settings allow more.

An endpoint's URL is checked when it is created (scheme, and a host written as an IP
address in any notation). Hostnames are checked when a request connects: the name is
resolved once, every address it resolves to must be allowed, and the connection goes to
the address that was checked, so a second lookup (DNS rebinding) cannot change it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from django_outbox import conf
from django_outbox.exceptions import UnsafeDestination

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Hosts that only digits, dots and hex letters make up may be IPv4 in a short notation
#: (decimal "2130706433", hex "0x7f.1", octal "0177.0.0.1"), which resolvers accept.
_NUMERIC_HOST = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)


def allowed_networks() -> list[Network]:
    return [ipaddress.ip_network(n) for n in conf.get().WEBHOOKS.ALLOWED_NETWORKS]


def refusal(address: IPAddress, allowed: Sequence[Network]) -> str | None:
    """Why ``address`` may not be reached, as a phrase that names it ("10.0.0.1, a private
    address"), or None: it may."""
    inner = _embedded(address)
    if any(candidate in network for candidate in (address, *inner) for network in allowed):
        return None
    for candidate in (address, *inner):
        reason = _kind(candidate)
        if reason:
            shown = "" if candidate == address else f" (which holds {candidate})"
            return f"{_spelled(address)}{shown}, {reason}"
    return None


def _spelled(address: IPAddress) -> str:
    """``address`` as people write it: an IPv4-mapped IPv6 address with its IPv4 part
    dotted, as Python 3.13 prints it (3.11 and 3.12 print ``::ffff:a00:1``)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return f"::ffff:{address.ipv4_mapped}"
    return str(address)


def _embedded(address: IPAddress) -> list[IPAddress]:
    """IPv4 addresses an IPv6 address carries: mapped, 6to4 and Teredo forms."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    inner: list[IPAddress] = []
    if address.ipv4_mapped:
        inner.append(address.ipv4_mapped)
    if address.sixtofour:
        inner.append(address.sixtofour)
    if address.teredo:
        inner.extend(address.teredo)
    # IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96) forms.
    if int(address) >> 32 == 0 or address in ipaddress.ip_network("64:ff9b::/96"):
        inner.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return inner


def _kind(address: IPAddress) -> str | None:
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (cloud metadata services live there)"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL:
        return "a unique-local address"
    if address.is_private:
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "an address that is not public"
    return None


_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")


def literal_address(host: str) -> IPAddress | None:
    """The address a URL host spells in any notation, or None for a hostname."""
    host = host.strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(host) and any(c.isdigit() for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


#: Longer URLs are refused: Django's URLValidator stops there, and so do many servers.
MAX_URL_LENGTH = 2048
#: What may hold userinfo in a URL: after "scheme:" and an optional "//", up to the first
#: "/", "?", "#" or "\\" (which browsers and some parsers treat as "/").
_AUTHORITY = re.compile(r"[^:/?#]*:(?://)?([^/?#\\]*)")


def check_url(url: str, *, for_customers: bool = False) -> None:
    """ValidationError unless ``url`` is an http(s) URL that may be delivered to.

    ``for_customers``: the message is for the portal's users, who cannot change the
    application's settings, so it names none."""
    options = conf.get().WEBHOOKS
    if not isinstance(url, str):
        raise ValidationError(f"An endpoint URL must be a string, not {type(url).__name__}.")
    # First, and without a URL parser that could fail on it: every later message echoes
    # the URL, and this one must not (it holds a password).
    authority = _AUTHORITY.match(url)
    if authority is not None and "@" in authority[1]:
        raise ValidationError(
            "An endpoint URL must not hold credentials (user:password@host): they would not "
            "be sent, and would show in logs and the admin. Receivers know a delivery is "
            "yours by its signature.",
            code="invalid",
        )
    if len(url) > MAX_URL_LENGTH:
        raise ValidationError(
            f"An endpoint URL may be at most {MAX_URL_LENGTH:,} characters; this one has "
            f"{len(url):,} ({url[:40]!r}…).",
            code="invalid",
        )
    schemes = ["https", "http"] if options.ALLOW_HTTP else ["https"]
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise ValidationError(f"{url!r} is not a valid URL ({exc}).", code="invalid") from None
    if scheme == "http" and not options.ALLOW_HTTP:
        raise ValidationError(
            f"{url!r} uses http://; webhooks need https://"
            + ("." if for_customers else " unless OUTBOX['WEBHOOKS']['ALLOW_HTTP'] is True."),
            code="insecure",
        )
    # First the address, in whatever notation: the most useful thing to say of it.
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    address = literal_address(host)
    if address is not None and (why := refusal(address, allowed_networks())):
        raise ValidationError(
            f"{url!r} points at {why}; webhooks go to public addresses only"
            + (
                "."
                if for_customers
                else ", unless OUTBOX['WEBHOOKS']['ALLOWED_NETWORKS'] allows it."
            ),
            code="unsafe",
        )
    try:
        URLValidator(schemes=schemes)(url)
    except ValidationError:
        raise ValidationError(
            f"{url!r} is not a valid {' or '.join(schemes)} URL.", code="invalid"
        ) from None


class GuardedBackend(httpcore.SyncBackend):
    """Resolves once, refuses what the guard refuses, connects to the address it checked."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"could not resolve {host!r}: {exc}") from exc
        addresses: list[IPAddress] = []
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if address not in addresses:
                addresses.append(address)
        allowed = allowed_networks()
        for address in addresses:
            if why := refusal(address, allowed):
                where = (
                    f"the host is {why}"
                    if literal_address(host) is not None
                    else f"{host} resolves to {why}"
                )
                raise UnsafeDestination(
                    f"{where}; refused (OUTBOX['WEBHOOKS']['ALLOWED_NETWORKS'] can allow it; "
                    "a worker reads its settings when it starts)"
                )
        last: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                last = exc
        raise last or httpcore.ConnectError(f"{host!r} resolved to no address")


def guarded_pool(ssl_context: Any = None) -> httpcore.ConnectionPool:
    """A connection pool of httpcore (the engine of httpx) whose every connection is made
    through GuardedBackend.

    No proxies: one would connect on our behalf, unchecked. TLS as httpx sets it up
    (certifi's roots; no environment variables), unless ``ssl_context`` is given."""
    return httpcore.ConnectionPool(
        ssl_context=ssl_context or httpx.create_ssl_context(trust_env=False),
        max_connections=None,
        max_keepalive_connections=20,
        network_backend=GuardedBackend(),
    )
