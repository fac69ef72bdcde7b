"""The SSRF guard: outbound HTTP to a URL that a tenant chose (the `http.webhook` job, the
webhook notifications), never into the operator's own network.

The host must be on SCHEDULER_WEBHOOK_ALLOWED_HOSTS; every address it resolves to must be public
unless the host is on SCHEDULER_WEBHOOK_ALLOW_PRIVATE; and the connection goes to an address that
was checked, so a second, different DNS answer cannot redirect it (DNS rebinding). A Deadline
bounds the whole request, however a server splits its answer.

Failures that no retry can fix (a URL or host the settings refuse) raise WebhookRefused, a
PermanentError: the run fails at once. DNS failures and unreachable hosts raise WebhookError.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

from webapp.catalog.context import PermanentError

ALLOWED_HOSTS_SETTING = "SCHEDULER_WEBHOOK_ALLOWED_HOSTS"
ALLOW_PRIVATE_SETTING = "SCHEDULER_WEBHOOK_ALLOW_PRIVATE"
TIMEOUT_SETTING = "SCHEDULER_WEBHOOK_TIMEOUT"
DEFAULT_TIMEOUT = 10.0
UNSAFE_CHARACTERS = re.compile(r"[\x00-\x20\x7f]")  # urlsplit would drop some of them silently
RETRYABLE_CLIENT_ERRORS = (408, 429)  # Request Timeout, Too Many Requests: worth another try


# socket.getaddrinfo, or a fixed answer in tests: (family, type, proto, canonname, sockaddr).
Resolver = Callable[[str, int], Sequence[tuple[Any, Any, Any, Any, tuple[Any, ...]]]]
HostList = str | Iterable[str] | None


class WebhookError(ValueError):
    """A webhook URL, target or answer that the job refuses; the message says which.

    Retried while attempts remain, unless it is a WebhookRefused."""


class WebhookRefused(WebhookError, PermanentError):
    """A webhook that cannot succeed as configured: not retried."""


@dataclass(frozen=True)
class WebhookURL:
    scheme: Literal["http", "https"]
    host: str  # lower-case, IPv6 without brackets
    port: int
    target: str  # path and query, as sent in the request line
    shown: str  # the URL without its query, which may hold a token, for the run's output


@dataclass(frozen=True)
class WebhookTarget:
    url: WebhookURL
    addresses: tuple[str, ...]  # checked addresses, in resolver order; the only ones connected to


def parse_webhook_url(url: str) -> WebhookURL:
    """Splits an http(s) URL without credentials, or raises WebhookError."""
    if UNSAFE_CHARACTERS.search(url):
        raise WebhookRefused("webhook URL must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookRefused(f"webhook URL is not valid: {exc}") from None
    if parts.scheme == "http":
        scheme: Literal["http", "https"] = "http"
    elif parts.scheme == "https":
        scheme = "https"
    else:
        raise WebhookRefused("webhook URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise WebhookRefused("webhook URL must not contain credentials")
    if not parts.hostname:
        raise WebhookRefused("webhook URL has no host")
    path = parts.path or "/"
    return WebhookURL(
        scheme=scheme,
        host=_normalize_host(parts.hostname),
        port=port or (443 if scheme == "https" else 80),
        target=f"{path}?{parts.query}" if parts.query else path,
        shown=urlunsplit((scheme, parts.netloc, path, "", "")),
    )


def check_webhook_target(
    url: str,
    allowed_hosts: HostList,
    allow_private_hosts: HostList,
    resolve: Resolver = socket.getaddrinfo,
) -> WebhookTarget:
    """Checks a webhook URL against the operator's host policy and resolves it, once.

    `allowed_hosts` entries are exact hosts or `*.example.com` (any subdomain, not the bare
    domain); `allow_private_hosts` entries are exact hosts only, and each must also be allowed.
    """
    parsed = parse_webhook_url(url)
    check_allowed_host(parsed.host, allowed_hosts)
    try:
        answers = resolve(parsed.host, parsed.port)
    except OSError as exc:
        raise WebhookError(f"cannot resolve webhook host {parsed.host!r}: {exc}") from exc
    # The scope of a link-local IPv6 address ('%eth0') is not part of the address.
    addresses = list(dict.fromkeys(str(answer[4][0]).split("%")[0] for answer in answers))
    if not addresses:
        raise WebhookError(f"webhook host {parsed.host!r} has no address")
    if parsed.host not in host_list(allow_private_hosts, ALLOW_PRIVATE_SETTING):
        for address in addresses:
            if not _is_public(ipaddress.ip_address(address)):
                raise WebhookRefused(
                    f"webhook host {parsed.host!r} resolves to {address}, which is not a public "
                    f"address (see {ALLOW_PRIVATE_SETTING})"
                )
    return WebhookTarget(url=parsed, addresses=tuple(addresses))


def check_allowed_host(host: str, allowed_hosts: HostList) -> None:
    """Raises WebhookRefused naming the allowed hosts unless `host` (normalized) is one."""
    allowed = host_list(allowed_hosts)
    if any(_host_matches(host, pattern) for pattern in allowed):
        return
    if not allowed:
        raise WebhookRefused(
            f"host {host!r} is not allowed: no hosts are allowed ({ALLOWED_HOSTS_SETTING} is empty)"
        )
    raise WebhookRefused(f"host {host!r} is not allowed; allowed hosts: {', '.join(allowed)}")


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # is_global already excludes loopback, link-local, private, unspecified and IPv4-mapped
    # IPv6 addresses, but counts multicast and some reserved ranges as global.
    if not address.is_global or address.is_multicast or address.is_reserved:
        return False
    # A 6to4 address routes to the IPv4 address inside it.
    embedded = address.sixtofour if isinstance(address, ipaddress.IPv6Address) else None
    return embedded is None or _is_public(embedded)


def _normalize_host(host: str) -> str:
    return host.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")


def host_list(hosts: HostList, setting: str = ALLOWED_HOSTS_SETTING) -> tuple[str, ...]:
    """The hosts of a setting, normalized, in the operator's order, each once."""
    items = hosts.split(",") if isinstance(hosts, str) else list(hosts or ())
    if not all(isinstance(host, str) for host in items):
        raise WebhookRefused(f"{setting} must be a list of hosts or a comma-separated string")
    return tuple(dict.fromkeys(_normalize_host(host) for host in items if host.strip()))


def _host_matches(host: str, pattern: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def request_timeout(config: Mapping[str, object]) -> float:
    """SCHEDULER_WEBHOOK_TIMEOUT: the job's and the notification webhooks' bound on a request."""
    value = config.get(TIMEOUT_SETTING, DEFAULT_TIMEOUT)
    if not isinstance(value, int | float) or not value > 0:
        raise WebhookRefused(f"{TIMEOUT_SETTING} must be a number of seconds above zero")
    return float(value)


class Deadline:
    """The end of a whole request: each socket operation may take only the time left.

    A socket timeout alone applies to each read: a server sending a byte at a time would hold
    the worker's thread as long as it likes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left, or TimeoutError once the deadline has passed."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {self.seconds:g} s")
        return left


class _DeadlineIO:
    """Sets the socket's timeout to the time left before each send and receive: http.client
    reads the status line, headers and body through these, however the server splits them."""

    deadline: Deadline | None = None

    def _before(self) -> None:
        if self.deadline is not None:
            cast(socket.socket, self).settimeout(self.deadline.left())

    def recv(self, *args: Any) -> Any:
        self._before()
        return super().recv(*args)  # type: ignore[misc]

    def recv_into(self, *args: Any) -> Any:
        self._before()
        return super().recv_into(*args)  # type: ignore[misc]

    def send(self, *args: Any) -> Any:
        self._before()
        return super().send(*args)  # type: ignore[misc]

    def sendall(self, *args: Any) -> Any:
        self._before()  # sendall's timeout bounds the whole call, not each chunk
        return super().sendall(*args)  # type: ignore[misc]


class DeadlineSocket(_DeadlineIO, socket.socket):
    pass


class DeadlineSSLSocket(_DeadlineIO, ssl.SSLSocket):
    pass


def _connect_first(addresses: Iterable[str], port: int, deadline: Deadline) -> DeadlineSocket:
    """Connects to the first checked address that answers, as socket.create_connection would,
    within the deadline."""
    error: OSError = OSError("no address to connect to")
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = DeadlineSocket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(deadline.left())
            sock.connect((address, port))
        except OSError as exc:
            sock.close()
            error = exc
            continue
        sock.deadline = deadline
        return sock
    raise error


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Sends `Host: <the URL's host>` but connects only to addresses checked beforehand."""

    def __init__(self, target: WebhookTarget, deadline: Deadline) -> None:
        super().__init__(target.url.host, target.url.port, timeout=deadline.seconds)
        self.addresses = target.addresses
        self.deadline = deadline

    def connect(self) -> None:
        self.sock = _connect_first(self.addresses, self.port, self.deadline)


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As PinnedHTTPConnection; the certificate is verified for the URL's host (SNI too)."""

    def __init__(self, target: WebhookTarget, deadline: Deadline) -> None:
        self.tls = ssl.create_default_context()
        self.tls.sslsocket_class = DeadlineSSLSocket
        super().__init__(
            target.url.host, target.url.port, timeout=deadline.seconds, context=self.tls
        )
        self.addresses = target.addresses
        self.deadline = deadline

    def connect(self) -> None:
        sock = _connect_first(self.addresses, self.port, self.deadline)
        sock.settimeout(self.deadline.left())  # the handshake is one call: bounded by this
        tls = cast(DeadlineSSLSocket, self.tls.wrap_socket(sock, server_hostname=self.host))
        tls.deadline = self.deadline
        self.sock = tls


def pinned_connection(
    target: WebhookTarget, deadline: Deadline
) -> PinnedHTTPConnection | PinnedHTTPSConnection:
    """A connection to the checked addresses of `target` only (DNS rebinding cannot move it)."""
    if target.url.scheme == "https":
        return PinnedHTTPSConnection(target, deadline)
    return PinnedHTTPConnection(target, deadline)
