"""A throwaway PostgreSQL cluster for the tests and benchmarks: initdb in a temp folder, own port.

Used when no server is given through SCHEDULER_TEST_POSTGRES_URL. As root the server binaries
run as the `postgres` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL server binaries here, or the cluster would not start."""


@dataclass
class Cluster:
    directory: str
    port: int
    bindir: str
    options: str = ""  # the server's settings, for pg_ctl start

    def start_server(self) -> None:
        """Starts the server (again), and returns once it accepts connections."""
        start = run_as_owner(
            [
                f"{self.bindir}/pg_ctl",
                "-D",
                self.data,
                "-o",
                self.options,
                "-l",
                os.path.join(self.directory, "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        if start.returncode != 0:
            log = open(os.path.join(self.directory, "server.log")).read()[-2000:]
            raise ClusterUnavailable(f"PostgreSQL did not start: {start.stderr.strip()} {log}")

    def stop_server(self) -> None:
        """Stops the server, its data kept (an outage: connections are cut at once)."""
        run_as_owner([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"])

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        run_as_owner([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"])
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def data(self) -> str:
        return os.path.join(self.directory, "data")


def find_bindir() -> str:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.realpath(on_path))
    for initdb in candidates:
        if os.access(initdb, os.X_OK):
            return os.path.dirname(initdb)
    raise ClusterUnavailable("no PostgreSQL server binaries (initdb) found")


def free_port() -> int:
    """A port nothing listens on now, chosen by the kernel at random: the tests' servers (and
    those of parallel test processes, pytest -n) each take their own. Another process may take
    it before the server binds it: servers that last the session retry with another."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_as_owner(command: list[str]) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def start_cluster(durable: bool = False) -> Cluster:
    """Starts a new cluster; `durable=False` trades crash safety for speed (tests only)."""
    bindir = find_bindir()
    directory = tempfile.mkdtemp(prefix="scheduler-pg-")
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    cluster = Cluster(directory=directory, port=0, bindir=bindir)
    init = run_as_owner(
        [
            f"{bindir}/initdb",
            "-D",
            cluster.data,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
    )
    if init.returncode != 0:
        raise ClusterUnavailable(f"initdb failed: {init.stderr.strip()}")
    tries = 3  # another process may take the free port before the server binds it
    while True:
        tries -= 1
        cluster.port = free_port()
        settings = [
            f"-p {cluster.port}",
            f"-k {directory}",
            "-c listen_addresses=127.0.0.1",
            "-c max_connections=200",
            "-c shared_buffers=256MB",
        ]
        if not durable:
            settings += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        cluster.options = " ".join(settings)
        try:
            cluster.start_server()
            return cluster
        except ClusterUnavailable:
            if not tries:
                raise
