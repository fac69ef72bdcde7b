"""A real PgBouncer in transaction pooling mode in front of the tests' PostgreSQL server: its own
folder and port, started once for the session, as production runs it (docs/how-to/deploy.md, "Behind
PgBouncer"). As root it runs as the `postgres` user (PgBouncer refuses to run as root), as the
throwaway cluster does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

import psycopg
from sqlalchemy.engine import make_url

from tests.pg_cluster import free_port

# Debian installs it in /usr/sbin, which is not on every user's PATH.
CANDIDATES = ("pgbouncer", "/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer")
CONFIG = """\
[databases]
* = host={host} port={port} user={user} {password}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
server_login_retry = 1
# FIFO, not LIFO: consecutive transactions of one client land on different server connections,
# as under a busy production pool (a prepared statement or any session state shows at once).
server_round_robin = 1
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


class PgBouncerUnavailable(RuntimeError):
    """No pgbouncer binary here, or it would not start."""


class PooledUrl(str):
    """A database URL through PgBouncer, which knows the server's own (`direct`) URL."""

    direct: str

    def __new__(cls, pooled: str, direct: str) -> PooledUrl:
        url = super().__new__(cls, pooled)
        url.direct = direct
        return url


def pooler_settings(database_url: str) -> dict[str, str]:
    """What the app and its workers need besides the URL: behind PgBouncer, the pooler named
    and the direct URL for LISTEN; nothing otherwise."""
    if not isinstance(database_url, PooledUrl):
        return {}
    return {
        "SCHEDULER_DATABASE_POOLER": "pgbouncer",
        "SCHEDULER_LISTEN_DATABASE_URL": database_url.direct,
    }


@dataclass
class PgBouncer:
    process: subprocess.Popen[bytes]
    directory: str
    port: int

    def url(self, direct: str) -> PooledUrl:
        """The URL of the database of `direct` (an SQLAlchemy URL) through this PgBouncer."""
        pooled = make_url(direct).set(host="127.0.0.1", port=self.port, password=None)
        return PooledUrl(pooled.render_as_string(hide_password=False), direct)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # runuser passes it on; PgBouncer stops at once
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def log(self) -> str:
        try:
            with open(os.path.join(self.directory, "pgbouncer.log")) as file:
                return file.read()[-2000:]
        except OSError:
            return ""


def find_pgbouncer() -> str:
    for candidate in CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    raise PgBouncerUnavailable("no pgbouncer binary (apt-get install pgbouncer)")


def start_pgbouncer(admin_url: str) -> PgBouncer:
    """PgBouncer in transaction mode in front of the server of `admin_url` (every database on
    it, as its user): returns once it accepts connections."""
    binary = find_pgbouncer()
    server = make_url(admin_url)
    directory = tempfile.mkdtemp(prefix="scheduler-pgbouncer-")
    as_owner: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    tries = 3  # another process may take the free port before PgBouncer binds it
    while True:
        tries -= 1
        port = free_port()
        config = os.path.join(directory, "pgbouncer.ini")
        with open(config, "w") as file:
            file.write(
                CONFIG.format(
                    host=server.host or "127.0.0.1",
                    port=server.port or 5432,
                    user=server.username or "postgres",
                    password=f"password={server.password}" if server.password else "",
                    listen_port=port,
                    directory=directory,
                )
            )
        process = subprocess.Popen(
            [*as_owner, binary, config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        bouncer = PgBouncer(process, directory, port)
        if accepts_connections(bouncer, server.database or "postgres"):
            return bouncer
        log = bouncer.log
        if process.poll() is None:
            process.terminate()
            process.wait(10)
        if not tries:
            shutil.rmtree(directory, ignore_errors=True)
            raise PgBouncerUnavailable(f"PgBouncer did not start: {log}")


def accepts_connections(bouncer: PgBouncer, database: str) -> bool:
    conninfo = f"postgresql://127.0.0.1:{bouncer.port}/{database}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and bouncer.process.poll() is None:
        try:
            with psycopg.connect(conninfo, connect_timeout=2) as connection:
                connection.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            time.sleep(0.05)
    return False
