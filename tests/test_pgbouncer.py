"""The panel and the settings behind a real PgBouncer in transaction pooling mode
(tests/pg_bouncer.py; docs/how-to/deploy.md, "Behind PgBouncer"). The workers go through it in the
exactly-once, fencing and Run now tests (`also_pgbouncer` and `postgresql_and_pgbouncer` in
test_worker_processes, test_faults and test_fencing)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from flask import Flask
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tests.conftest import World
from tests.panel_helpers import Panel, seed
from webapp.config import ConfigError, load_settings
from webapp.extensions import db

pgbouncer_only = pytest.mark.parametrize("database_url", ["pgbouncer"], indirect=True)
SERVER_CONNECTIONS = 4
BACKEND = "SELECT pg_backend_pid()"


def open_server_connections(database_url: str) -> None:
    """Transactions through PgBouncer at once, so that its pool holds that many server
    connections, which it then hands to one client's transactions in turn."""
    url = make_url(database_url).set(drivername="postgresql")
    connections = [
        psycopg.connect(url.render_as_string(hide_password=False))
        for _ in range(SERVER_CONNECTIONS)
    ]
    pids = {connection.execute(BACKEND).fetchone() for connection in connections}
    assert len(pids) == SERVER_CONNECTIONS
    for connection in connections:
        connection.commit()  # its server connection goes back to the pool (not when cut mid-way)
        connection.close()


@pgbouncer_only
def test_a_connection_runs_one_statement_in_transaction_after_transaction(
    app: Flask, database_url: str
) -> None:
    """As the worker's loop and its notifications thread do: one pooled connection, a statement
    run again and again, each time in a transaction of its own. psycopg would prepare it from
    its sixth time on the server connection of that transaction; PgBouncer hands the next one
    to another server connection, where it does not exist. Behind the pooler nothing is
    prepared."""
    open_server_connections(database_url)
    servers = set()
    with db.engine.connect() as connection:
        for _ in range(12):
            servers.add(connection.execute(text(BACKEND)).scalar())
            connection.commit()
    assert len(servers) > 1, "each transaction must be able to land on another server connection"


@pgbouncer_only
def test_the_panel_answers_page_after_page_through_pgbouncer(app: Flask, world: World) -> None:
    seeded = seed(world)
    panel = Panel(app, world.alice)
    for page in ("/", f"/schedules/{seeded.report.id}", "/runs", "/audit"):
        for _ in range(8):
            response = panel.get(page)
            assert response.status_code == 200, (page, response.get_data(as_text=True)[-500:])


def test_a_listen_url_that_is_not_postgresql_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SCHEDULER_LISTEN_DATABASE_URL", "sqlite:///listen.db")
    with pytest.raises(ConfigError, match=r"^SCHEDULER_LISTEN_DATABASE_URL must be a PostgreSQL"):
        load_settings(str(tmp_path))
    monkeypatch.setenv("SCHEDULER_LISTEN_DATABASE_URL", "postgres://u@db/x")
    assert load_settings(str(tmp_path)).settings.SCHEDULER_LISTEN_DATABASE_URL
