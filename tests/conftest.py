"""Fixtures: a fresh, migrated database per test on SQLite and on PostgreSQL, and a small world."""

from __future__ import annotations

import contextvars
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient, FlaskCliRunner
from flask_migrate import upgrade
from psycopg import sql
from sqlalchemy.engine import make_url
from werkzeug.test import TestResponse

from tests.pg_bouncer import PgBouncer, PgBouncerUnavailable, pooler_settings, start_pgbouncer
from tests.pg_cluster import Cluster, ClusterUnavailable, start_cluster
from tests.worker_support import Workers
from webapp import create_app
from webapp.catalog import JobContext
from webapp.config import INSTANCE_FILE
from webapp.extensions import db
from webapp.models import Membership, Run, RunStatus, Schedule, Tenant, Trigger, User, Worker
from webapp.scheduler.local_wakeup import DIRECTORY_SUFFIX
from webapp.scheduler.runs import LEASE_CURSORS
from webapp.services import accounts
from webapp.services.accounts import add_user, create_tenant, hash_password
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule

if TYPE_CHECKING:  # browser_support imports this module
    from tests.browser_support import LiveServer, PageErrors

T = TypeVar("T")
IN_CI = os.environ.get("CI", "").lower() == "true"
PASSWORD = "correct-horse-battery"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start processes or a browser first (each takes seconds): under `make test`
    (pytest -n) they then start early instead of one of them running last on its own."""
    items.sort(key=lambda item: not {"slow", "browser"} & {m.name for m in item.iter_markers()})
    for item in items:  # pytest-xdist would make a third queue of a test marked for two
        queues = {mark.args[0] for mark in item.iter_markers("xdist_group")}
        assert len(queues) <= 1, f"{item.nodeid} is in two xdist groups: {queues}"


def migrated_app(url: str, **config: object) -> Flask:
    return create_app(
        {
            "TESTING": True,
            "SQLALCHEMY_DATABASE_URI": url,
            "SCHEDULER_DEMO_JOBS": True,
            "SECRET_KEY": "test-secret",
            **config,
        }
    )


def run_migrations(url: str) -> None:
    app = migrated_app(url)
    with app.app_context():
        upgrade()
        db.engine.dispose()


# What makes a test database differ from a fresh clone of the template, beside its rows: its
# tables, columns, indexes, constraints, triggers, functions, the migration it is at, and any
# planner statistics (a fresh clone has none).
SCHEMA = """
SELECT 'column', c.relname, c.relkind::text, a.attname, format_type(a.atttypid, a.atttypmod),
       a.attnotnull::text
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index', tablename, indexname, indexdef, '', '' FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'constraint', conrelid::regclass::text, conname, pg_get_constraintdef(oid), '', ''
FROM pg_constraint WHERE connamespace = 'public'::regnamespace
UNION ALL
SELECT 'trigger', tgrelid::regclass::text, tgname, '', '', '' FROM pg_trigger WHERE NOT tgisinternal
UNION ALL
SELECT 'function', proname, '', '', '', '' FROM pg_proc WHERE pronamespace = 'public'::regnamespace
UNION ALL
SELECT 'statistics', tablename, attname, '', '', '' FROM pg_stats WHERE schemaname = 'public'
UNION ALL
SELECT 'migration', version_num, '', '', '', '' FROM alembic_version
ORDER BY 1, 2, 3, 4
"""
TABLES = """
SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'
"""


class PostgresServer:
    """One server for the session; each test gets a database cloned from a migrated template.

    Under pytest -n each worker process has a session of its own: its own cluster, or, on a
    server given by SCHEDULER_TEST_POSTGRES_URL, its own template (test databases have random
    names)."""

    TEMPLATE = f"scheduler_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"

    def __init__(self, admin_url: str, cluster: Cluster | None) -> None:
        self.admin_url = admin_url
        self.cluster = cluster
        self.template_ready = False
        # The next test's database, cloned from the template while this test runs: a clone costs
        # a few tenths of a second, which a test that waits on a process or a browser hides.
        self.cloning = ThreadPoolExecutor(max_workers=1)
        self.spare: Future[str] | None = None
        self.reused: str | None = None  # this process's test database (test_database)
        self.fresh_schema: tuple[Any, ...] | None = None  # SCHEMA of a fresh clone

    def conninfo(self, database: str = "postgres") -> str:
        url = make_url(self.admin_url).set(drivername="postgresql", database=database)
        return url.render_as_string(hide_password=False)

    def sqlalchemy_url(self, database: str) -> str:
        url = make_url(self.admin_url).set(drivername="postgresql+psycopg", database=database)
        return url.render_as_string(hide_password=False)

    def execute(self, sql: str) -> None:
        with psycopg.connect(self.conninfo(), autocommit=True) as connection:
            connection.execute(sql)

    def create_database(self, migrated: bool = True) -> str:
        """A new database of its own, empty or at `upgrade head` (a clone of the template)."""
        if not migrated:
            return self.new_database("")
        if not self.template_ready:
            self.execute(f'DROP DATABASE IF EXISTS "{self.TEMPLATE}" WITH (FORCE)')
            self.execute(f'CREATE DATABASE "{self.TEMPLATE}"')
            run_migrations(self.sqlalchemy_url(self.TEMPLATE))
            self.template_ready = True
        name = self.spare.result() if self.spare else self.new_database(self.TEMPLATE)
        self.spare = self.cloning.submit(self.new_database, self.TEMPLATE)
        return name

    def test_database(self) -> str:
        """This process's database for the next test, as `upgrade head` left it. Emptied after
        each test (TRUNCATE, ids from 1 again), which costs the server a fraction of a clone; a
        clone of its own again after a test that changed the schema, left planner statistics
        (ANALYZE) or a lock behind."""
        if self.reused is not None and self.emptied(self.reused):
            return self.reused
        if self.reused is not None:
            self.drop_database(self.reused)
        self.reused = self.create_database()
        with psycopg.connect(self.conninfo(self.reused), autocommit=True) as connection:
            schema = tuple(connection.execute(SCHEMA).fetchall())
        self.fresh_schema = self.fresh_schema or schema
        return self.reused

    def emptied(self, name: str) -> bool:
        """Empties `name` as a fresh clone is, if its schema is still a fresh clone's."""
        try:
            with psycopg.connect(self.conninfo(name), autocommit=True) as connection:
                if tuple(connection.execute(SCHEMA).fetchall()) != self.fresh_schema:
                    return False
                connection.execute("SET lock_timeout = '5s'")
                tables = [row[0] for row in connection.execute(TABLES)]
                connection.execute(
                    sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                        sql.SQL(", ").join(map(sql.Identifier, tables))
                    )
                )
        except psycopg.Error:  # a lock held by a process the test left behind, say
            return False
        return True

    def new_database(self, template: str) -> str:
        name = f"test_{uuid.uuid4().hex[:12]}"
        self.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        """Drops the spare clone (a server given by SCHEDULER_TEST_POSTGRES_URL outlives us)."""
        self.cloning.shutdown()
        if self.reused:
            self.drop_database(self.reused)
            self.reused = None
        if self.spare:
            self.drop_database(self.spare.result())
            self.spare = None


@pytest.fixture(scope="session", autouse=True)
def instance_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An empty instance folder: tests never read the checkout's instance/config.py (that
    `make run` writes) nor write beside it. Worker processes that tests start inherit it."""
    path = str(tmp_path_factory.mktemp("instance"))
    previous = os.environ.get("SCHEDULER_INSTANCE_PATH")
    os.environ["SCHEDULER_INSTANCE_PATH"] = path
    yield path
    if previous is None:
        del os.environ["SCHEDULER_INSTANCE_PATH"]
    else:
        os.environ["SCHEDULER_INSTANCE_PATH"] = previous


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | str]:
    """The PostgreSQL server, or the reason there is none (a string)."""
    given = os.environ.get("SCHEDULER_TEST_POSTGRES_URL")
    if given:
        server = PostgresServer(given, None)
        yield server
        server.close()
        return
    try:
        cluster = start_cluster()
    except ClusterUnavailable as reason:
        yield str(reason)
        return
    try:
        server = PostgresServer(cluster.admin_url, cluster)
        yield server
        server.close()
    finally:
        cluster.stop()


def required(found: T | str, what: str) -> T:
    """`found`, unless it is the reason there is none: then the test skips (fails with
    CI=true, where every test must run)."""
    if isinstance(found, str):
        if IN_CI:
            pytest.fail(f"CI=true needs {what}, but: {found}")
        pytest.skip(f"{what} unavailable: {found}")
    return found


def require_postgres(server: PostgresServer | str) -> PostgresServer:
    return required(server, "PostgreSQL")


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: PostgresServer | str) -> Iterator[PgBouncer | str]:
    """A PgBouncer in transaction mode in front of the session's PostgreSQL server, or the
    reason there is none (a string)."""
    server = require_postgres(postgres_server)
    try:
        bouncer = start_pgbouncer(server.admin_url)
    except PgBouncerUnavailable as reason:
        yield str(reason)
        return
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("template") / "template.db"
    run_migrations(f"sqlite:///{path}")
    return str(path)


@pytest.fixture(scope="session")
def sqlite_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where this process's tests find their SQLite database (database_url)."""
    return str(tmp_path_factory.mktemp("sqlite") / "test.db")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, sqlite_template: str, sqlite_path: str) -> str:
    """A fresh database at `upgrade head`, on each dialect in turn; "pgbouncer" (only where a
    test asks for it) is PostgreSQL's through PgBouncer in transaction mode (a PooledUrl).
    The same URL for every test of a process and dialect, so that `app` can serve them all."""
    if request.param == "sqlite":
        return fresh_copy(sqlite_template, sqlite_path)
    server = require_postgres(request.getfixturevalue("postgres_server"))
    url = server.sqlalchemy_url(server.test_database())
    if request.param == "pgbouncer":
        return required(request.getfixturevalue("pgbouncer"), "PgBouncer").url(url)
    return url


def fresh_copy(template: str, path: str) -> str:
    """`path` replaced by a copy of `template` (a new file: a process a test left behind keeps
    the old one), without the old one's journal and workers' wake-up folder; its URL."""
    shutil.copyfile(template, f"{path}.new")
    for journal in ("-wal", "-shm", "-journal"):
        with suppress(FileNotFoundError):
            os.remove(path + journal)
    wake = Path(f"{path}{DIRECTORY_SUFFIX}")  # or a file there, as a test may leave
    if wake.is_dir():
        shutil.rmtree(wake)
    wake.unlink(missing_ok=True)
    os.replace(f"{path}.new", path)
    return f"sqlite:///{path}"


class RequestIsolatedClient(FlaskClient):
    """Runs each request as production does, in its own app context, g and database session.

    The tests keep an app context open for their own queries; without this, requests would share
    its `g` (Flask-Login's cached user, Flask-WTF's token) and its session.
    """

    def open(self, *args: Any, **kwargs: Any) -> TestResponse:
        db.session.commit()  # end the test's own transaction: it must not hold SQLite's lock
        response = contextvars.Context().run(super().open, *args, **kwargs)
        db.session.expire_all()
        return response


@dataclass
class BuiltApp:
    """An app as `app` built it, with what it was built from and what a test may change."""

    app: Flask
    sources: tuple[object, ...]
    config: dict[str, Any]
    extensions: dict[str, Any]

    def put_back(self) -> None:
        """The app's settings as built, and no lease cursors of its engine's workers."""
        self.app.config.clear()
        self.app.config.update(self.config)
        self.app.extensions.clear()
        self.app.extensions.update(self.extensions)
        with self.app.app_context():
            LEASE_CURSORS.pop(db.engine, None)


BUILT: dict[str, BuiltApp] = {}  # this process's apps of `app`, by database URL


def settings_sources() -> tuple[object, ...]:
    """What create_app reads beside the mapping it is given: the environment and the instance
    file (a test may change either before it asks for `app`)."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    path = Path(os.environ["SCHEDULER_INSTANCE_PATH"], INSTANCE_FILE)
    return (sorted(environment.items()), path.read_bytes() if path.exists() else None)


@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    """The app on `database_url` with the tests' settings, in an app context. Built once per
    process and URL (building one costs more than most tests: werkzeug compiles every route,
    Jinja every template), and put back as built after each test: its config and settings, its
    session and connections closed; built again when the environment or instance file differs."""
    sources = settings_sources()
    built = BUILT.get(database_url)
    if built is None or built.sources != sources:
        application = migrated_app(database_url, **pooler_settings(database_url))
        application.test_client_class = RequestIsolatedClient
        built = BUILT[database_url] = BuiltApp(
            application, sources, dict(application.config), dict(application.extensions)
        )
    try:
        with built.app.app_context():
            yield built.app
            db.session.remove()
            db.engine.dispose()
    finally:
        built.put_back()


@pytest.fixture
def cli(app: Flask) -> FlaskCliRunner:
    return app.test_cli_runner()


# scrypt is slow on purpose: 0.15 s for each hash made and each login here, a third of the
# panel tests' time. In the tests' own processes passwords are hashed by the same code at a
# lower cost (N=1024 instead of 32768: a real scrypt hash, 40 times cheaper), and a login checks
# a hash at the cost it names. test_cli_accounts checks the product's own cost.
PRODUCT_PASSWORD_METHOD = accounts.PASSWORD_METHOD
TEST_PASSWORD_METHOD = "scrypt:1024:8:1"


@pytest.fixture(scope="session", autouse=True)
def cheap_password_hashes() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accounts, "PASSWORD_METHOD", TEST_PASSWORD_METHOD)
        yield


@pytest.fixture(scope="session")
def password_hash(cheap_password_hashes: None) -> str:
    return hash_password(PASSWORD)  # the shared test password's, once per session


@dataclass
class World:
    alpha: Tenant
    beta: Tenant
    alice: User
    bob: User
    charlie: User


@pytest.fixture
def world(app: Flask, password_hash: str) -> World:
    """Tenant alpha (alice admin, bob viewer) and tenant beta (charlie admin)."""
    alpha = Tenant(slug="alpha", name="Alpha Corp", time_zone="Europe/Berlin")
    beta = Tenant(slug="beta", name="Beta Ltd", time_zone="America/New_York")
    users = {
        name: User(email=f"{name}@example.com", password_hash=password_hash)
        for name in ("alice", "bob", "charlie")
    }
    db.session.add_all([alpha, beta, *users.values()])
    db.session.flush()
    db.session.add_all(
        [
            Membership(user_id=users["alice"].id, tenant_id=alpha.id, role="admin"),
            Membership(user_id=users["bob"].id, tenant_id=alpha.id, role="viewer"),
            Membership(user_id=users["charlie"].id, tenant_id=beta.id, role="admin"),
        ]
    )
    db.session.commit()
    return World(alpha, beta, users["alice"], users["bob"], users["charlie"])


def make_schedule(
    tenant: Tenant | None,
    name: str = "Morning hello",
    next_run_at: datetime | None = None,
    *,
    by: User | Actor | None = None,
    now: datetime | None = None,
    **fields: Any,
) -> Schedule:
    """A schedule of `tenant` that runs `demo.echo` of its name every hour in UTC, committed;
    `fields` over these.

    Without `by`: written straight to the table, unchecked, as the scheduler finds it (tenant
    None: a system schedule), `name` also its key, due at `next_run_at` (default now), `fields`
    its columns. With `by` (a user, or an actor such as Actor.cli()): created through the
    service at `now` as the panel and the API create one: checked, audited, its key from its
    name, its next fire from its cron."""
    values: dict[str, Any] = {
        "job": "demo.echo",
        "args": {"message": name},
        "cron": "0 * * * *",
        "time_zone": "UTC",
        **fields,
    }
    if by is not None:
        assert tenant is not None and next_run_at is None, "the service makes tenant schedules"
        actor = Actor.for_user(by) if isinstance(by, User) else by
        data = ScheduleInput(name=name, **values)  # type: ignore[typeddict-item]
        return create_schedule(tenant, data, actor, now or datetime.now(UTC))
    schedule = Schedule(
        **{
            "tenant_id": tenant.id if tenant else None,
            "scope": "tenant" if tenant else "system",
            "key": name,
            "name": name,
            "next_run_at": next_run_at or datetime.now(UTC),
            **values,
        }
    )
    db.session.add(schedule)
    db.session.commit()
    return schedule


def make_run(
    owner: Schedule | Tenant | None,
    status: RunStatus = "queued",
    minutes_ago: float = 0,
    *,
    trigger: Trigger | None = None,
    scheduled_for: datetime | None = None,
    idempotency_key: str | None = None,
    **fields: Any,
) -> Run:
    """A run, committed: of a schedule (its job and args, trigger "schedule"), or a manual run
    of `demo.echo` in a tenant (None: a system run). Scheduled `minutes_ago` (or at
    `scheduled_for`), queued and available then, started and finished as its status says;
    other columns (those times among them) from `fields`."""
    scheduled = scheduled_for or datetime.now(UTC) - timedelta(minutes=minutes_ago)
    finished = status in ("succeeded", "failed")
    if isinstance(owner, Schedule):
        made: dict[str, Any] = {"schedule_id": owner.id, "job": owner.job, "args": owner.args}
        tenant_id = owner.tenant_id
    else:
        made = {"job": "demo.echo", "args": {"message": "hello"}}
        tenant_id = owner.id if owner else None
    columns = {
        **made,
        "attempt": 1 if status != "queued" else 0,
        "queued_at": scheduled,
        "available_at": scheduled,
        "started_at": scheduled + timedelta(seconds=2) if status != "queued" else None,
        "finished_at": scheduled + timedelta(seconds=5) if finished else None,
        **fields,
    }
    run = Run(
        tenant_id=tenant_id,
        trigger=trigger or ("schedule" if isinstance(owner, Schedule) else "manual"),
        scheduled_for=scheduled,
        idempotency_key=idempotency_key or f"test:{uuid.uuid4().hex}",
        status=status,
        **columns,
    )
    db.session.add(run)
    db.session.commit()
    return run


@pytest.fixture
def live_panel(sqlite_template: str, tmp_path: Path) -> Iterator[LiveServer]:
    """The panel served on a free port, on a fresh SQLite database: tenant alpha (Europe/Berlin)
    with alice (admin) and bob (viewer). Tests add what else they need in its app context."""
    with alpha_panel(sqlite_template, tmp_path) as live:
        yield live


@contextmanager
def alpha_panel(sqlite_template: str, tmp_path: Path, **config: object) -> Iterator[LiveServer]:
    """`live_panel`'s server, with `config`."""
    from tests.browser_support import live_server, require_chromium

    require_chromium()
    with live_server(sqlite_template, str(tmp_path), **config) as live, live.app.app_context():
        create_tenant("alpha", "Alpha Corp", "Europe/Berlin")
        add_user("alice@example.com", "alpha", "admin", PASSWORD)
        add_user("bob@example.com", "alpha", "viewer", PASSWORD)
        db.session.remove()
        yield live
        db.session.remove()
        db.engine.dispose()


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless Chromium per test process; each test opens its own context (new_page)."""
    from tests.browser_support import chromium_browser

    with chromium_browser() as browser:
        yield browser


@pytest.fixture
def errors() -> PageErrors:
    from tests.browser_support import PageErrors

    return PageErrors()


@pytest.fixture
def new_page(chromium: Any, errors: PageErrors) -> Iterator[Any]:
    """A page in a context of its own (no cookies from other tests), JavaScript on, dialogs
    (hx-confirm) accepted, its errors collected in `errors`."""
    context = chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors.watch(page)
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


@pytest.fixture(params=[True, False], ids=["js", "no-js"])
def js(request: pytest.FixtureRequest) -> bool:
    """Each browser test that takes `page` runs twice: with JavaScript, and without."""
    return bool(request.param)


@pytest.fixture
def page(chromium: Any, errors: PageErrors, js: bool) -> Iterator[Any]:
    """As `new_page`, with JavaScript on or off (`js`)."""
    context = chromium.new_context(java_script_enabled=js)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors.watch(page)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm of Delete
    yield page
    context.close()


@pytest.fixture
def job_context(caplog: pytest.LogCaptureFixture) -> Callable[..., JobContext]:
    """A job's context (run 7 of schedule 3) whose lines go to caplog, as a worker's run logger
    collects them: `caplog.messages` are what the job wrote. `fields` over JobContext's."""

    def make(**fields: Any) -> JobContext:
        logger = logging.Logger("run")  # outside logging's registry: only the job writes here
        logger.addHandler(caplog.handler)
        key = "schedule-3-1700000000"
        return JobContext(**{"run_id": 7, "idempotency_key": key, "logger": logger, **fields})

    return make


WorkerFactory = Callable[..., Worker]


@pytest.fixture
def make_worker(app: Flask) -> WorkerFactory:
    """A worker row, committed: `fields` over a two-slot worker that has just heartbeated."""

    def make(**fields: Any) -> Worker:
        worker = Worker(**{"hostname": "test", "pid": 1, "concurrency": 2, **fields})
        db.session.add(worker)
        db.session.commit()
        return worker

    return make


@pytest.fixture
def workers(app: Flask, database_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(database_url, tmp_path)
    yield started
    started.stop_all()
