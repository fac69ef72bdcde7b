"""Upgrades without downtime: a worker of the previous release keeps firing and executing
while the next release's migration is applied (migrations expand; they never break old code)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import require_postgres
from tests.worker_support import PROJECT, Workers

MIGRATIONS = PROJECT / "migrations" / "versions"


def git(*args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(PROJECT), *args], check=True, capture_output=True
    ).stdout


def previous_release(into: Path) -> str:
    """Extracts the code as it was just before the newest migration was added (the release an
    operator upgrades from) into `into`; returns that release's head revision. Along main's
    first parents: a migration that came with a merge (renumbered in it) was added by the merge."""
    newest = max(MIGRATIONS.glob("[0-9]*.py")).name
    try:
        added = git(
            *("log", "-n1", "--first-parent", "-m", "--no-renames", "--diff-filter=A"),
            *("--format=%H", "--", f"migrations/versions/{newest}"),
        )
        archive = git(
            "archive", "--format=tar", f"{added.decode().strip()}^", "webapp", "migrations"
        )
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        # A source archive or a shallow clone has no previous release to run.
        pytest.skip(f"needs the checkout's git history: {error}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return max((into / "migrations" / "versions").glob("[0-9]*.py")).name.split("_")[0]


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'upgrade.db'}"
        return
    server = require_postgres(request.getfixturevalue("postgres_server"))
    name = server.create_database(migrated=False)
    try:
        yield server.sqlalchemy_url(name)
    finally:
        server.drop_database(name)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def flask(code: Path, url: str, *args: str) -> None:
    environment = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": "test"}
    subprocess.run(
        [sys.executable, "-m", "flask", "--app", "webapp", *args],
        cwd=code,
        env=environment,
        check=True,
        capture_output=True,
    )


@pytest.mark.slow
def test_a_worker_of_the_previous_release_keeps_firing_while_the_migration_runs(
    empty_url: str, tmp_path: Path
) -> None:
    old = tmp_path / "previous-release"
    old_head = previous_release(old)
    flask(old, empty_url, "db", "upgrade")  # the database as the previous release left it
    engine = create_engine(empty_url)
    now = datetime.now(UTC).replace(tzinfo=None)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO tenants (id, slug, name, time_zone, created_at)"
                " VALUES (1, 'acme', 'Acme', 'UTC', :now)"
            ),
            {"now": now},
        )
        for key in ("before", "after"):
            connection.execute(
                text(
                    "INSERT INTO schedules (tenant_id, scope, key, name, job, args, cron,"
                    " time_zone, active, misfire_policy, overlap_policy, next_run_at,"
                    " created_at, updated_at) VALUES (1, 'tenant', :key, :key, 'demo.echo',"
                    " '{\"message\": \"hi\"}', '0 0 1 1 *', 'UTC', :active, 'fire_once',"
                    " 'allow', :due, :now, :now)"
                ),
                # `after` waits, paused, until the new schema is in place.
                {
                    "key": key,
                    "active": key == "before",
                    "due": now - timedelta(seconds=1),
                    "now": now,
                },
            )

    def statuses() -> dict[str, str]:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT COALESCE(s.key, 'manual'), r.status FROM runs r"
                    " LEFT JOIN schedules s ON s.id = r.schedule_id AND r.\"trigger\" <> 'manual'"
                )
            )
            return {key: status for key, status in rows}

    workers = Workers(empty_url, tmp_path, code=old)
    try:
        worker = workers.start()
        wait_for(lambda: statuses() == {"before": "succeeded"}, "the old worker's first fire")

        flask(PROJECT, empty_url, "db", "upgrade")  # this release's migration, worker running
        with engine.begin() as connection:
            current = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            assert current != old_head
            connection.execute(
                text("UPDATE schedules SET active = :yes, next_run_at = :due WHERE key = 'after'"),
                {"yes": True, "due": datetime.now(UTC).replace(tzinfo=None)},
            )
            connection.execute(
                text(
                    'INSERT INTO runs (tenant_id, schedule_id, job, args, "trigger",'
                    " scheduled_for, idempotency_key, status, attempt, max_attempts,"
                    " fires_covered, queued_at, available_at) VALUES (1, NULL, 'demo.echo',"
                    " '{\"message\": \"now\"}', 'manual', :now, 'manual-after-upgrade', 'queued',"
                    " 0, 1, 1, :now, :now)"
                ),
                {"now": datetime.now(UTC).replace(tzinfo=None)},
            )
        wait_for(
            lambda: (
                statuses() == {"before": "succeeded", "after": "succeeded", "manual": "succeeded"}
            ),
            "the old worker to fire and run on the new schema",
        )
        assert worker.poll() is None, workers.logs()
    finally:
        workers.stop_all()
        engine.dispose()
    assert "Traceback" not in workers.logs()
