"""A throwaway Redis server for the Celery tests: Debian's `redis-server` on a free port, no
persistence (a restart loses what it held, as the broker-restart test wants), stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from tests.pg_cluster import free_port

IN_CI = os.environ.get("CI", "").lower() == "true"


class RedisServer:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.directory = tempfile.mkdtemp(prefix="scheduler-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Starts the server (again, on the same port), and returns once it answers."""
        log = open(os.path.join(self.directory, "redis.log"), "ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.directory,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as probe:
                    # Ours, not another test process's server on this port: its folder.
                    probe.sendall(b"CONFIG GET dir\r\n")
                    if os.path.realpath(self.directory).encode() in probe.recv(4096):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def flush(self) -> None:
        """Empties the server between tests: no test sees another's messages."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
            connection.sendall(b"FLUSHALL\r\n")
            connection.recv(16)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )
    if binary is None:
        if IN_CI:
            pytest.fail("CI=true needs redis-server (Debian package redis-server)")
        pytest.skip("redis-server is not installed")
    server = RedisServer(binary)
    try:
        server.start()
    except RuntimeError:  # the free port was taken meanwhile (pg_cluster.free_port)
        server.port = free_port()
        server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)
