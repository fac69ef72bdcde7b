"""Waking idle workers at once on PostgreSQL (LISTEN/NOTIFY); polling remains the fallback."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

CHANNEL = "scheduler_wake"


def notify_workers(session: Session) -> None:
    """Queues a notification that PostgreSQL delivers when (and only if) the transaction commits."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
