"""Waking idle workers at once when a transaction queues work; polling remains the fallback.

PostgreSQL: a NOTIFY on CHANNEL, which every worker LISTENs to. SQLite: after the commit,
local_wakeup's datagrams to the workers on this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, event, func, text
from sqlalchemy.orm import Session

from webapp.scheduler.local_wakeup import wake_directory, wake_workers

CHANNEL = "scheduler_wake"
PENDING = "wake_local_workers"  # session.info: the directory to wake once this transaction commits


def notify_workers(session: Session) -> None:
    """Wakes the workers when (and only if) the transaction commits."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
        return
    directory = wake_directory(bind.engine.url)
    if directory is None:
        return
    if not event.contains(session, "after_commit", wake_after_commit):
        event.listen(session, "after_commit", wake_after_commit)
        event.listen(session, "after_rollback", forget_wake)
    session.info[PENDING] = directory


def wake_workers_column() -> ColumnElement[Any]:
    """PostgreSQL: notify_workers as a column, for a statement that queues work and wakes
    the workers in one round trip."""
    return func.pg_notify(CHANNEL, "")


def wake_after_commit(session: Session) -> None:
    directory: Path | None = session.info.pop(PENDING, None)
    if directory is not None:
        wake_workers(directory)


def forget_wake(session: Session) -> None:
    session.info.pop(PENDING, None)
