"""The http.webhook job: the host policy that keeps it out of the operator's network, and real
calls to a server on 127.0.0.1 (no traffic leaves this machine: other hosts only ever get a
fixed DNS answer)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from flask import Flask

from tests.conftest import World, make_run
from tests.scheduler_helpers import all_runs, execute_leased
from tests.settings_support import reconfigure
from webapp.catalog import (
    ArgsError,
    JobContext,
    PermanentError,
    WebhookError,
    build_catalog,
    check_webhook_target,
)
from webapp.catalog.webhook import Resolver, WebhookParams, WebhookRefused, webhook
from webapp.extensions import db
from webapp.models import Run, Tenant, Worker
from webapp.scheduler.leases import lease_once


def resolves_to(*addresses: str) -> Resolver:
    """A DNS answer fixed in advance, shaped like socket.getaddrinfo's."""

    def resolve(host: str, port: int) -> list[tuple[Any, Any, Any, Any, tuple[Any, ...]]]:
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (address, port),
            )
            for address in addresses
        ]

    return resolve


def cannot_resolve(host: str, port: int) -> list[tuple[Any, Any, Any, Any, tuple[Any, ...]]]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)


# The host policy


def test_an_allowed_host_with_public_addresses_is_accepted() -> None:
    target = check_webhook_target(
        "https://hooks.example.com/notify?token=abc#frag",
        ["hooks.example.com"],
        [],
        resolve=resolves_to("93.184.216.34", "2606:2800:220:1::1"),
    )

    assert target.addresses == ("93.184.216.34", "2606:2800:220:1::1")
    assert (target.url.scheme, target.url.host, target.url.port) == (
        "https",
        "hooks.example.com",
        443,
    )
    assert target.url.target == "/notify?token=abc"
    assert target.url.shown == "https://hooks.example.com/notify"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://api.example.com/", "*.example.com"),
        ("https://a.b.example.com/", "*.example.com"),
        ("https://HOOKS.Example.COM./", "hooks.example.com"),
        ("https://hooks.example.com/", " other.test , hooks.example.com "),
    ],
)
def test_allowed_hosts_are_exact_names_or_subdomain_wildcards(url: str, allowed: str) -> None:
    target = check_webhook_target(url, allowed, None, resolve=resolves_to("93.184.216.34"))

    assert target.addresses == ("93.184.216.34",)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://evil.test/", ["hooks.example.com"]),
        ("https://example.com/", ["*.example.com"]),
        ("https://evilexample.com/", ["*.example.com"]),
        ("https://hooks.example.com.evil.test/", ["hooks.example.com"]),
        ("https://hooks.example.com/", []),
        ("https://hooks.example.com/", None),
    ],
)
def test_a_host_that_is_not_allowed_is_refused(url: str, allowed: list[str] | None) -> None:
    with pytest.raises(PermanentError, match=r"^host '[^']+' is not allowed[;:] "):
        check_webhook_target(url, allowed, None, resolve=resolves_to("93.184.216.34"))


@pytest.mark.parametrize(
    ("allowed", "message"),
    [
        (
            " b.example, *.a.example,B.example ",
            "host 'evil.example' is not allowed; allowed hosts: b.example, *.a.example",
        ),
        (
            [],
            "host 'evil.example' is not allowed: no hosts are allowed "
            "(SCHEDULER_WEBHOOK_ALLOWED_HOSTS is empty)",
        ),
    ],
)
def test_the_refusal_names_the_allowed_hosts(allowed: str | list[str], message: str) -> None:
    with pytest.raises(WebhookRefused) as refused:
        check_webhook_target("https://Evil.example/", allowed, None, resolve=cannot_resolve)

    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("10.0.0.1", "private"),
        ("192.168.1.10", "private"),
        ("172.16.0.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("::1", "IPv6 loopback"),
        ("::", "IPv6 unspecified"),
        ("fe80::1%eth0", "IPv6 link-local with a scope"),
        ("fd00::1", "IPv6 unique local"),
        ("ff02::1", "IPv6 multicast"),
        ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
        ("2002:7f00:1::", "6to4 of loopback"),
    ],
)
def test_a_host_resolving_to_a_non_public_address_is_refused(address: str, kind: str) -> None:
    with pytest.raises(WebhookError) as refused:
        check_webhook_target(
            "https://hooks.example.com/", ["hooks.example.com"], [], resolve=resolves_to(address)
        )

    assert str(refused.value) == (
        f"webhook host 'hooks.example.com' resolves to {address.split('%')[0]}, which is not a "
        "public address (see SCHEDULER_WEBHOOK_ALLOW_PRIVATE)"
    ), kind


def test_one_non_public_address_among_public_ones_is_enough_to_refuse() -> None:
    with pytest.raises(WebhookError, match=r"resolves to 10\.0\.0\.1,"):
        check_webhook_target(
            "https://hooks.example.com/",
            ["hooks.example.com"],
            [],
            resolve=resolves_to("93.184.216.34", "10.0.0.1"),
        )


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://10.0.0.1/", "10.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://127.0.0.1:8080/", "127.0.0.1"),
        ("http://[::1]:8080/", "::1"),
    ],
)
def test_an_allowed_ip_literal_that_is_not_public_is_refused(url: str, address: str) -> None:
    # The real resolver: an IP literal needs no DNS.
    with pytest.raises(WebhookError) as refused:
        check_webhook_target(url, [address, f"[{address}]"], [])

    assert str(refused.value) == (
        f"webhook host '{address}' resolves to {address}, which is not a public address "
        "(see SCHEDULER_WEBHOOK_ALLOW_PRIVATE)"
    )


def test_a_private_host_is_reached_only_when_also_explicitly_allowed_private() -> None:
    internal = resolves_to("10.1.2.3")

    target = check_webhook_target(
        "http://ci.internal/", ["ci.internal"], "ci.internal", resolve=internal
    )
    assert target.addresses == ("10.1.2.3",)

    with pytest.raises(WebhookError, match="not a public address"):
        check_webhook_target(
            "http://ci.internal/", ["*.internal"], ["*.internal"], resolve=internal
        )
    with pytest.raises(WebhookError, match=r"^host 'ci\.internal' is not allowed"):
        check_webhook_target("http://ci.internal/", [], ["ci.internal"], resolve=internal)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://hooks.example.com/", "webhook URL must start with http:// or https://"),
        ("file:///etc/passwd", "webhook URL must start with http:// or https://"),
        ("gopher://hooks.example.com/", "webhook URL must start with http:// or https://"),
        ("javascript:alert(1)", "webhook URL must start with http:// or https://"),
        ("hooks.example.com/x", "webhook URL must start with http:// or https://"),
        ("https://user:secret@hooks.example.com/", "webhook URL must not contain credentials"),
        ("https://token@hooks.example.com/", "webhook URL must not contain credentials"),
        ("https:///x", "webhook URL has no host"),
        ("https://hooks.example.com:99999/", "webhook URL is not valid: Port out of range 0-65535"),
        ("https://[::1/", "webhook URL is not valid: Invalid IPv6 URL"),
        (
            "https://hooks.example.com/a b",
            "webhook URL must not contain spaces or control characters",
        ),
        (
            "https://hooks.example.com/\r\nX-Injected: 1",
            "webhook URL must not contain spaces or control characters",
        ),
    ],
)
def test_a_url_that_is_not_plain_http_is_refused(url: str, message: str) -> None:
    with pytest.raises(WebhookError) as refused:
        check_webhook_target(url, ["hooks.example.com"], [], resolve=resolves_to("93.184.216.34"))

    assert str(refused.value) == message


def test_a_host_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(WebhookError, match=r"^cannot resolve webhook host 'hooks.example.com'"):
        check_webhook_target(
            "https://hooks.example.com/", ["hooks.example.com"], [], resolve=cannot_resolve
        )


def test_a_host_setting_that_is_not_a_list_of_hosts_is_refused() -> None:
    with pytest.raises(WebhookError) as refused:
        not_hosts: list[Any] = [3]
        check_webhook_target("https://hooks.example.com/", not_hosts, [])

    assert str(refused.value) == (
        "SCHEDULER_WEBHOOK_ALLOWED_HOSTS must be a list of hosts or a comma-separated string"
    )


# Parameters


def test_the_url_scheme_and_the_body_are_checked_when_a_schedule_is_saved() -> None:
    spec = build_catalog(demo_jobs=False).get("http.webhook")

    with pytest.raises(ArgsError) as refused:
        spec.validate_args({"url": "ftp://hooks.example.com/", "body": "{not json"})

    assert refused.value.errors == [
        ("url", "Value error, webhook URL must start with http:// or https://"),
        (
            "body",
            "Value error, body must be JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        ),
    ]


def test_a_blank_body_means_no_body() -> None:
    spec = build_catalog(demo_jobs=False).get("http.webhook")

    args = spec.validate_args({"url": "https://hooks.example.com/", "body": "  "})

    assert args["body"] is None


# Real calls to a server on 127.0.0.1


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackServer:
    port: int
    received: list[Received] = field(default_factory=list)
    status: int = 200
    answer: bytes = b'{"ok": true}'
    extra_headers: dict[str, str] = field(default_factory=dict)

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A real HTTP server on 127.0.0.1 that records requests and answers as told."""
    httpd = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = LoopbackServer(port=httpd.server_address[1])

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            state.received.append(Received(self.command, self.path, dict(self.headers), body))
            self.send_response(state.status)
            for name, value in state.extra_headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(state.answer)))
            self.end_headers()
            self.wfile.write(state.answer)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep the test output clean

    httpd.RequestHandlerClass = Handler
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


LOOPBACK_ALLOWED = {
    "SCHEDULER_WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"],
    "SCHEDULER_WEBHOOK_ALLOW_PRIVATE": ["127.0.0.1"],
    "SCHEDULER_WEBHOOK_TIMEOUT": 5.0,
}


def test_it_sends_the_request_and_records_the_answer(
    server: LoopbackServer, job_context: Callable[..., JobContext], caplog: pytest.LogCaptureFixture
) -> None:
    spec = build_catalog(demo_jobs=False).get("http.webhook")
    ctx = job_context(config=LOOPBACK_ALLOWED)

    spec.call(ctx, {"url": server.url("/hook?token=s3cret"), "body": '{"event": "tick"}'})

    [request] = server.received
    assert (request.method, request.path, request.body) == (
        "POST",
        "/hook?token=s3cret",
        b'{"event": "tick"}',
    )
    assert request.headers["Host"] == f"127.0.0.1:{server.port}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Idempotency-Key"] == "schedule-3-1700000000"
    assert caplog.messages == [
        f"POST http://127.0.0.1:{server.port}/hook -> HTTP 200 OK",
        '{"ok": true}',
    ]


def test_a_request_without_body_sends_no_content_type(
    server: LoopbackServer, job_context: Callable[..., JobContext]
) -> None:
    ctx = job_context(config=LOOPBACK_ALLOWED)

    webhook(ctx, WebhookParams(method="GET", url=server.url()))

    [request] = server.received
    assert (request.method, request.body) == ("GET", b"")
    assert "Content-Type" not in request.headers


def test_it_connects_to_the_checked_address_and_names_the_url_host(
    server: LoopbackServer, job_context: Callable[..., JobContext]
) -> None:
    config = {
        "SCHEDULER_WEBHOOK_ALLOWED_HOSTS": "hooks.internal.test",
        "SCHEDULER_WEBHOOK_ALLOW_PRIVATE": "hooks.internal.test",
    }
    ctx = job_context(config=config)

    params = WebhookParams(url=server.url(host="hooks.internal.test"))
    webhook(ctx, params, resolve=resolves_to("127.0.0.1"))

    [request] = server.received
    assert request.headers["Host"] == f"hooks.internal.test:{server.port}"


def test_the_loopback_server_is_refused_unless_allowed_private(
    server: LoopbackServer, job_context: Callable[..., JobContext]
) -> None:
    ctx = job_context(config={"SCHEDULER_WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]})

    with pytest.raises(WebhookError, match="not a public address"):
        webhook(ctx, WebhookParams(url=server.url()))

    assert server.received == []


def test_an_unexpected_status_fails_the_run(
    server: LoopbackServer, job_context: Callable[..., JobContext], caplog: pytest.LogCaptureFixture
) -> None:
    server.status, server.answer = 500, b"database down"
    ctx = job_context(config=LOOPBACK_ALLOWED)

    with pytest.raises(WebhookError) as failed:
        webhook(ctx, WebhookParams(url=server.url(), expected_status=204))

    assert str(failed.value) == "webhook answered HTTP 500, expected 204"
    assert caplog.messages[1] == "database down"


def test_it_does_not_follow_redirects(
    server: LoopbackServer, job_context: Callable[..., JobContext]
) -> None:
    server.status, server.answer = 302, b""
    server.extra_headers = {"Location": server.url("/elsewhere")}
    ctx = job_context(config=LOOPBACK_ALLOWED)

    with pytest.raises(WebhookError) as failed:
        webhook(ctx, WebhookParams(url=server.url()))

    assert (
        str(failed.value) == "webhook answered HTTP 302, expected 200 (redirects are not followed)"
    )
    assert [request.path for request in server.received] == ["/hook"]


def test_it_keeps_only_the_first_4_kib_of_the_answer(
    server: LoopbackServer, job_context: Callable[..., JobContext], caplog: pytest.LogCaptureFixture
) -> None:
    server.answer = b"x" * 10_000
    ctx = job_context(config=LOOPBACK_ALLOWED)

    webhook(ctx, WebhookParams(url=server.url()))

    assert caplog.messages[1:] == ["x" * 4096, "(answer cut at 4096 bytes)"]


@pytest.mark.parametrize("scheme", ["http", "https"])  # https: the TLS handshake never ends
def test_a_server_that_never_answers_times_out(
    scheme: str, job_context: Callable[..., JobContext]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never accepts
        port = silent.getsockname()[1]
        ctx = job_context(config={**LOOPBACK_ALLOWED, "SCHEDULER_WEBHOOK_TIMEOUT": 0.05})

        with pytest.raises(WebhookError) as failed:
            webhook(ctx, WebhookParams(url=f"{scheme}://127.0.0.1:{port}/"))

    assert str(failed.value) == (
        f"webhook request to {scheme}://127.0.0.1:{port}/ timed out after 0.05 s"
    )


@contextmanager
def trickling_server(interval: float, headers_at_once: bool) -> Iterator[int]:
    """A real server on 127.0.0.1 that answers one byte every `interval` seconds (after the
    headers, sent at once, if `headers_at_once`)."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            headers = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"
            answer = headers + b"x" * 20  # about 12 s in all: a failure, not a hang, if unbounded
            if headers_at_once:
                connection.sendall(headers)
                answer = answer[len(headers) :]
            for byte in answer:
                if stop.wait(interval):
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return  # the client gave up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(5)


@pytest.mark.parametrize("headers_at_once", [False, True], ids=["headers", "body"])
def test_a_server_sending_a_byte_at_a_time_times_out_at_the_deadline(
    headers_at_once: bool,
    job_context: Callable[..., JobContext],
) -> None:
    # Each byte comes well within the timeout; the whole answer never does. Before, the timeout
    # applied to each read and such a server held the thread for as long as it liked.
    with trickling_server(0.2, headers_at_once) as port:
        ctx = job_context(config={**LOOPBACK_ALLOWED, "SCHEDULER_WEBHOOK_TIMEOUT": 1})
        started = time.monotonic()
        with pytest.raises(WebhookError) as failed:
            webhook(ctx, WebhookParams(method="GET", url=f"http://127.0.0.1:{port}/slow"))
        elapsed = time.monotonic() - started

    assert (
        str(failed.value) == f"webhook request to http://127.0.0.1:{port}/slow timed out after 1 s"
    )
    assert not isinstance(failed.value, PermanentError)  # retried: it may be quicker next time
    assert elapsed < 3  # about 1 s; generous for a busy machine


def test_a_refused_connection_fails_the_run(job_context: Callable[..., JobContext]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    ctx = job_context(config=LOOPBACK_ALLOWED)

    with pytest.raises(WebhookError) as failed:
        webhook(ctx, WebhookParams(url=f"http://127.0.0.1:{port}/"))

    assert str(failed.value).startswith(f"webhook request to http://127.0.0.1:{port}/ failed: ")
    assert "Connection refused" in str(failed.value)


def test_a_timeout_setting_that_is_not_positive_is_refused_before_any_request(
    server: LoopbackServer,
    job_context: Callable[..., JobContext],
) -> None:
    ctx = job_context(config={**LOOPBACK_ALLOWED, "SCHEDULER_WEBHOOK_TIMEOUT": 0})

    with pytest.raises(WebhookError) as refused:
        webhook(ctx, WebhookParams(url=server.url()))

    assert str(refused.value) == "SCHEDULER_WEBHOOK_TIMEOUT must be a number of seconds above zero"
    assert server.received == []


# Through the worker: what is retried and what fails at once


def run_webhook_once(app: Flask, tenant: Tenant, **args: object) -> Run:
    """One attempt of an http.webhook run (three attempts allowed) leased and executed."""
    worker = Worker(hostname="test", pid=1, concurrency=1)
    db.session.add(worker)
    db.session.commit()
    make_run(tenant, scheduled_for=NOW, job="http.webhook", args=args, max_attempts=3)
    (leased,) = lease_once(db.session(), worker.id, NOW, timedelta(seconds=60), 1)
    execute_leased(leased, worker.id)
    (run,) = all_runs()
    return run


PERMANENT = ("failed", "not retried: WebhookRefused")
RETRIED = ("queued", "attempt 1 failed: WebhookError")


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(status, PERMANENT) for status in (400, 401, 403, 404, 410, 422)]
    + [(status, RETRIED) for status in (408, 429, 500, 502, 503)],
)
def test_a_4xx_answer_fails_at_once_but_5xx_408_and_429_are_retried(
    app: Flask, world: World, server: LoopbackServer, status: int, outcome: tuple[str, str]
) -> None:
    reconfigure(app, **LOOPBACK_ALLOWED)
    server.status = status

    run = run_webhook_once(app, world.alpha, url=server.url())

    (run_status, prefix) = outcome
    assert (run.status, run.attempt) == (run_status, 1)
    assert run.error is not None
    assert run.error.startswith(f"{prefix}: webhook answered HTTP {status}, expected 200\n")


def test_timeouts_and_refused_connections_are_retried(app: Flask, world: World) -> None:
    reconfigure(app, **{**LOOPBACK_ALLOWED, "SCHEDULER_WEBHOOK_TIMEOUT": 0.05})
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never accepts
        port = silent.getsockname()[1]
        timed_out = run_webhook_once(app, world.alpha, url=f"http://127.0.0.1:{port}/")
    assert timed_out.status == "queued" and "timed out after 0.05 s" in (timed_out.error or "")
    db.session.delete(timed_out)
    db.session.commit()
    refused = run_webhook_once(app, world.alpha, url=f"http://127.0.0.1:{port}/")  # closed
    assert refused.status == "queued" and "Connection refused" in (refused.error or "")


def test_a_private_address_fails_the_run_at_once(
    app: Flask, world: World, server: LoopbackServer
) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"])

    run = run_webhook_once(app, world.alpha, url=server.url())

    assert (run.status, run.attempt) == ("failed", 1)
    assert run.error is not None and run.error.startswith(
        "not retried: WebhookRefused: webhook host '127.0.0.1' resolves to 127.0.0.1, which is "
        "not a public address"
    )
    assert server.received == []


def test_a_host_no_longer_allowed_fails_the_run_at_once(
    app: Flask, world: World, server: LoopbackServer
) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["hooks.example.com"])

    run = run_webhook_once(app, world.alpha, url=server.url())

    assert (run.status, run.attempt, run.error) == (
        "failed",
        1,
        "not retried: args.url: host '127.0.0.1' is not allowed; allowed hosts: hooks.example.com",
    )
    assert server.received == []
