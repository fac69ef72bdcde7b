"""Database plumbing shared by every module: UTC timestamps, SQLite pragmas, write transactions,
searches in text."""

from __future__ import annotations

import functools
import json
import sqlite3
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Integer,
    String,
    any_,
    bindparam,
    cast,
    column,
    event,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, scoped_session
from sqlalchemy.types import TypeDecorator

# How long a SQLite writer waits for the write lock before "database is locked": 10 s.
BUSY_TIMEOUT = "PRAGMA busy_timeout=10000"
IMMEDIATE = "sqlite_begin_immediate"
RETRY_AFTER = 5  # seconds: what a 503 asks a client to wait while the database is away


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on both dialects (SQLite stores naive text, so we attach UTC back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: store aware UTC datetimes only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def text_problem(text: str) -> str | None:
    """Why the database cannot store `text`, or None: the one rule for every text a user sends
    (a form, the API, an import, the command line). PostgreSQL text holds no NUL; a lone
    surrogate (JSON's "\\ud800", a command line's undecodable byte) is no UTF-8 at all, and
    SQLite would store it only for every later read of it to fail."""
    if "\x00" in text:
        return "must not contain a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"is not valid text: it holds a lone surrogate (U+{ord(text[error.start]):04X})"
    return None


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a tenant, a schedule or a token, or None: text_problem's rule, and
    no control character (CR, LF, a tab...) nor line separator, which would split the name's line
    in a log, a header or an email subject."""
    problem = text_problem(name)
    if problem:
        return problem
    bad = next((c for c in name if unicodedata.category(c) == "Cc" or c in "\u2028\u2029"), None)
    if bad is not None:
        return f"must not contain a control character such as a line break (U+{ord(bad):04X})"
    return None


def bad_text(value: object, path: str = "") -> dict[str, str]:
    """text_problem for every string of a JSON-like value, keys included: path -> message
    (`args.message`, `items.0.name`; the whole value's is "")."""
    if isinstance(value, str):
        problem = text_problem(value)
        return {path: problem} if problem else {}
    if isinstance(value, list):
        value = dict(enumerate(value))
    if not isinstance(value, dict):
        return {}
    found: dict[str, str] = {}
    for key, item in value.items():
        name = str(key).encode("utf-8", "backslashreplace").decode()  # shown, never stored
        inner = f"{path}.{name}" if path else name
        problem = text_problem(key) if isinstance(key, str) else None
        found |= {inner: f"its name {problem}"} if problem else bad_text(item, inner)
    return found


MAX_JSON_DEPTH = 32  # objects and lists within each other; far more than any job's arguments


def load_user_json(text: str | bytes) -> Any:
    """JSON a user sent (an API body, an import, a webhook's body): the value, or ValueError
    saying what is wrong with it, including nesting deeper than MAX_JSON_DEPTH (which would
    otherwise take the parser, or whatever walks the value next, past Python's recursion
    limit)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 ({error.reason})") from None
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list) and depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(item, dict):
            pending.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            pending.extend((child, depth + 1) for child in item)
    return value


def storable(text: str) -> str:
    """`text` as the database can store it: what text_problem refuses (a NUL, a lone surrogate)
    written as a backslash escape. For text a job produced (its output, its error), which is
    recorded as it came, not refused."""
    if text_problem(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def decode_json_object(value: str) -> tuple[dict[str, Any], str | None]:
    """A stored JSON object (a run's arguments) decoded: (the object, None), or ({}, why it
    cannot be used): not JSON, not an object, or holding text that text_problem refuses."""
    try:
        decoded = json.loads(value)
    except ValueError as error:
        return {}, f"its stored arguments are not JSON ({error})"
    if not isinstance(decoded, dict):
        return {}, f"its stored arguments are not an object but {type(decoded).__name__}"
    bad = bad_text(decoded, "args")
    if bad:
        path, problem = next(iter(bad.items()))
        return {}, f"its stored arguments hold text that is not valid: {path} {problem}"
    return decoded, None


LIKE_ESCAPE = "/"


def contains_text(column: Any, parameter: str) -> ColumnElement[bool]:
    """Whether `column` contains, whatever the case, the value of the parameter `parameter`: a
    like_pattern. A parameter, not a value, so that a statement built once can search."""
    text = bindparam(parameter, type_=String)
    return func.lower(column).contains(text, escape=LIKE_ESCAPE)


def like_pattern(text: str) -> str:
    """`text` for contains_text: lower case, its wildcards (% and _) taken literally."""
    for character in (LIKE_ESCAPE, "%", "_"):
        text = text.replace(character, LIKE_ESCAPE + character)
    return text.lower()


def read_text(stored: bytes) -> str:
    return stored.decode("utf-8", "replace")


def install_engine_hooks(engine: Engine) -> None:
    """SQLite: WAL, a busy timeout, foreign keys, and BEGIN IMMEDIATE for write transactions."""
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine, "connect")
    def configure_sqlite(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # Let SQLAlchemy's begin event, not the driver, decide how a transaction starts.
        dbapi_connection.isolation_level = None
        # SQLite stores any bytes as text: one that is not UTF-8 (written behind our back) reads
        # as U+FFFD, rather than failing every statement that reads its row.
        dbapi_connection.text_factory = read_text
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(BUSY_TIMEOUT)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def begin_sqlite(connection: Any) -> None:
        # A deferred transaction that reads and then writes cannot wait for the write lock
        # (SQLite answers "database is locked" at once), so writers take it up front.
        immediate = connection.get_execution_options().get(IMMEDIATE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextmanager
def write_transaction(session: Session | scoped_session[Any]) -> Iterator[Session]:
    """One transaction for one state change: committed on success, rolled back on any error.

    On SQLite it holds the write lock from its first statement; a read-only transaction the
    session had open (a request's user lookup) is ended first, since it cannot be upgraded safely.
    PostgreSQL (read committed) goes on in the open transaction: ending it would cost a round
    trip and reload every object the request has already read.
    """
    current = session() if isinstance(session, scoped_session) else session
    if current.get_bind().dialect.name == "sqlite":
        if current.in_transaction():
            current.commit()
        current.connection(execution_options={IMMEDIATE: True})
    try:
        yield current
        current.commit()
    except BaseException:
        current.rollback()
        raise


# PostgreSQL's answers to the loser of a race that a second try may win: deadlock_detected,
# serialization_failure, and unique_violation (two requests both found a slug or an email free,
# and the other inserted it first: the second try finds it taken and says so, as when it came
# later). Its transaction was rolled back whole, so nothing of it was written.
LOST_RACE = {"40P01", "40001", "23505"}
TRIES = 3

P = ParamSpec("P")
T = TypeVar("T")


def lost_race(error: DBAPIError) -> bool:
    return getattr(error.orig, "sqlstate", None) in LOST_RACE


def retry_lost_race(change: Callable[P, T]) -> Callable[P, T]:
    """`change` (a function that is one whole write transaction, and safe to run again: it reads
    what it decides on inside the transaction) run again when PostgreSQL aborted it as the loser
    of a race (LOST_RACE), up to TRIES times."""

    @functools.wraps(change)
    def tried(*args: P.args, **kwargs: P.kwargs) -> T:
        for attempt in range(1, TRIES + 1):
            try:
                return change(*args, **kwargs)
            except DBAPIError as error:
                if attempt == TRIES or not lost_race(error):
                    raise
        raise AssertionError("unreachable")

    return tried


def is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


CLOCK = text("SELECT clock_timestamp()")


def database_now(session: Session) -> datetime:
    """PostgreSQL's clock, so that a worker with a skewed clock cannot fire early; the host's
    on SQLite."""
    if is_postgresql(session):
        moment: datetime = session.connection().execute(CLOCK).scalar_one()
        return moment.astimezone(UTC)
    return utcnow()


def now_or_database_clock() -> Any:
    """PostgreSQL: the parameter :now, or when it is NULL the statement's start on the
    database's clock (the one reapers compare leases with; a worker with a skewed clock cannot
    fire early), read in the statement itself: no round trip of its own. Stable within the
    statement, so an index still bounds a scan with it."""
    return func.coalesce(
        bindparam("now", type_=UTCDateTime), func.statement_timestamp(type_=UTCDateTime)
    )


def among_ids(column: Any, postgresql: bool) -> Any:
    """`column` among the list parameter :ids, for a statement built once: on PostgreSQL as one
    array parameter, since an expanding IN renders a placeholder per id on every call (in the
    worker's main thread, for batches of hundreds); SQLite has no arrays."""
    if postgresql:
        return column == any_(bindparam("ids", type_=ARRAY(Integer)))
    return column.in_(bindparam("ids", expanding=True))


def json_rows(rows: list[dict[str, Any]]) -> str:
    """Rows as a JSON array for jsonb_to_recordset (a batch as one parameter); datetimes
    (aware, UTC) as ISO 8601, which PostgreSQL parses."""
    return json.dumps(rows, default=iso_datetime, separators=(",", ":"))


def iso_datetime(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: store aware UTC datetimes only")
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_records(table: Any, columns: tuple[str, ...], alias: str = "v") -> Any:
    """PostgreSQL: the rows of the parameter :rows (json_rows) as a table `alias` with these
    columns of `table`, typed as there: jsonb_to_recordset(:rows) AS v(id INTEGER, ...)."""
    rows = func.jsonb_to_recordset(cast(bindparam("rows", type_=String), JSONB))
    typed = (column(name, table.c[name].type) for name in columns)
    return rows.table_valued(*typed).render_derived(name=alias, with_types=True)
