"""Slows down password guessing, per client address and per account, in the database.

Failed logins are rows in `login_attempts`, so the limit holds across processes and machines
(a counter in one process's memory would not). A subject with too many recent failures is
refused with 429 until its oldest failure in the window has aged out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select

from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import LoginAttempt

WINDOW = timedelta(minutes=15)
# One account is guessed at slowly; one address may be a whole office behind NAT.
MAX_FAILURES_PER_ACCOUNT = 5
MAX_FAILURES_PER_ADDRESS = 20


@dataclass(frozen=True)
class Subjects:
    address: str
    account: str

    @classmethod
    def of(cls, remote_addr: str | None, email: str) -> Subjects:
        return cls(address=f"ip:{remote_addr or 'unknown'}", account=f"email:{email[:250]}")

    def limits(self) -> tuple[tuple[str, int], ...]:
        return (
            (self.account, MAX_FAILURES_PER_ACCOUNT),
            (self.address, MAX_FAILURES_PER_ADDRESS),
        )


def retry_after(subjects: Subjects, now: datetime) -> int | None:
    """Seconds until a login may be tried again, or None if it may be tried now."""
    waits = []
    for subject, limit in subjects.limits():
        recent = (
            select(LoginAttempt.attempted_at)
            .where(LoginAttempt.subject == subject, LoginAttempt.attempted_at > now - WINDOW)
            .order_by(LoginAttempt.attempted_at.desc())
            .limit(limit)
            .subquery()
        )
        count, oldest = db.session.execute(
            select(func.count(), func.min(recent.c.attempted_at))
        ).one()
        if count >= limit and oldest is not None:
            waits.append(max(1, math.ceil((oldest + WINDOW - now).total_seconds())))
    return max(waits) if waits else None


def record_failure(subjects: Subjects, now: datetime) -> None:
    with write_transaction(db.session):
        db.session.execute(
            delete(LoginAttempt).where(
                LoginAttempt.subject.in_((subjects.account, subjects.address)),
                LoginAttempt.attempted_at <= now - WINDOW,
            )
        )
        db.session.add_all(
            [
                LoginAttempt(subject=subjects.account, attempted_at=now),
                LoginAttempt(subject=subjects.address, attempted_at=now),
            ]
        )


def forget_account_failures(subjects: Subjects) -> None:
    """After a successful login the account starts afresh (the address does not)."""
    db.session.execute(delete(LoginAttempt).where(LoginAttempt.subject == subjects.account))
