"""Slows down password guessing, in the database, without letting one address lock out others.

Every login attempt is counted *before* its password is checked, in one write transaction that
counts the recent failures and records this attempt (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: a
transaction-level advisory lock on the account). So 30 parallel guesses at one account get at
most the limit's worth of password checks, not 30. A successful login then takes its own
attempt back.

Failures are rows in `login_attempts`, so the limits hold across processes and machines:
- per account and address (`pair:`): 5 failures, then that address may not try that account;
- per account from anywhere (`email:`): 50, against guessing spread over many addresses;
- per address (`ip:`): 100, a coarse flood guard only. Behind a proxy every client shares one
  address, so past it the password is still checked: a correct password of a known account logs
  in, and only wrong ones are answered 429. Hard limits refuse before any check.

A known device (a valid device cookie of the account, see device_cookies) is counted apart:
its failures count against the device alone (`device:`, 5), not against the account, and the
account's limits do not apply to it. So 50 guesses from many addresses lock the account for
unknown devices only, while its owner's browser still logs in. The second factor lets its owner
through too: an account with two-factor login on is not refused by the account-wide ceiling
(its password alone opens nothing; the code that must follow is counted like a password), only
by the per-address ones.

Expired rows of every subject are deleted at each attempt, so guesses at emails that are never
tried again (unknown ones) leave nothing behind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, text

from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import LoginAttempt

WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_PAIR = 5
MAX_FAILURES_PER_ACCOUNT = 50
MAX_FAILURES_PER_ADDRESS = 100
MAX_FAILURES_PER_DEVICE = 5


@dataclass(frozen=True)
class Subjects:
    address: str
    account: str
    pair: str
    device: str | None = None  # a known device of the account (its device cookie's id)
    second_factor: bool = False  # the account has two-factor login on

    @classmethod
    def of(
        cls,
        remote_addr: str | None,
        email: str,
        device_id: str | None = None,
        second_factor: bool = False,
    ) -> Subjects:
        address = remote_addr or "unknown"
        account = email[:250]
        return cls(
            address=f"ip:{address}",
            account=f"email:{account}",
            pair=f"pair:{account}|{address}",
            device=f"device:{device_id}" if device_id else None,
            second_factor=second_factor,
        )

    def hard_limits(self) -> tuple[tuple[str, int], ...]:
        """Limits that refuse an attempt before its password is checked: a known device's own,
        or the account's from this address and (without a second factor) from anywhere."""
        if self.device is not None:
            return ((self.device, MAX_FAILURES_PER_DEVICE),)
        if self.second_factor:
            return ((self.pair, MAX_FAILURES_PER_PAIR),)
        return ((self.pair, MAX_FAILURES_PER_PAIR), (self.account, MAX_FAILURES_PER_ACCOUNT))

    def counted(self) -> tuple[str, ...]:
        """The subjects an attempt counts against until it succeeds."""
        if self.device is not None:
            return (self.device, self.address)
        return (self.pair, self.account, self.address)


@dataclass(frozen=True)
class Admission:
    """The outcome of counting an attempt: refused (`wait` seconds), or admitted and recorded."""

    wait: int | None
    attempt_ids: tuple[int, ...] = ()
    flooded_wait: int | None = None  # the address is past its flood guard: wrong answers 429


@dataclass(frozen=True)
class Attempt:
    """An attempt as `admit` counted it, kept until its outcome is known."""

    subjects: Subjects
    admission: Admission

    def forget(self) -> None:
        """It succeeded: `forget_success`, in a transaction of its own."""
        with write_transaction(db.session):
            forget_success(self.subjects, self.admission)


def wait_message(wait: int) -> str:
    """What a refused attempt is told: how long until the next one is counted again."""
    minutes = max(1, round(wait / 60))
    plural = "s" if minutes != 1 else ""
    return f"Too many failed attempts. Wait {minutes} minute{plural} before trying again."


def wait_for(subject: str, limit: int, now: datetime) -> int | None:
    """Seconds until `subject` is below `limit` failures in the window, or None if it is now."""
    recent = (
        select(LoginAttempt.attempted_at)
        .where(LoginAttempt.subject == subject, LoginAttempt.attempted_at > now - WINDOW)
        .order_by(LoginAttempt.attempted_at.desc())
        .limit(limit)
        .subquery()
    )
    count, oldest = db.session.execute(select(func.count(), func.min(recent.c.attempted_at))).one()
    if count >= limit and oldest is not None:
        return max(1, math.ceil((oldest + WINDOW - now).total_seconds()))
    return None


def admit(subjects: Subjects, now: datetime) -> Admission:
    """Counts recent failures and, unless a hard limit is reached, records this attempt as one:
    atomically, so parallel attempts cannot all pass the same count."""
    with write_transaction(db.session) as session:
        if session.get_bind().dialect.name == "postgresql":
            # Serialises the attempts at one account (SQLite's write lock already does).
            session.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:subject))"),
                {"subject": subjects.account},
            )
        session.execute(delete(LoginAttempt).where(LoginAttempt.attempted_at <= now - WINDOW))
        waits = [wait_for(subject, limit, now) for subject, limit in subjects.hard_limits()]
        refused = [wait for wait in waits if wait is not None]
        if refused:
            return Admission(wait=max(refused))
        flooded_wait = wait_for(subjects.address, MAX_FAILURES_PER_ADDRESS, now)
        attempts = [
            LoginAttempt(subject=subject, attempted_at=now) for subject in subjects.counted()
        ]
        session.add_all(attempts)
        session.flush()
        return Admission(
            wait=None,
            attempt_ids=tuple(attempt.id for attempt in attempts),
            flooded_wait=flooded_wait,
        )


def forget_success(subjects: Subjects, admission: Admission) -> None:
    """After a successful login: this attempt was no failure, and the account may start afresh
    from this address (or device). Failures from other addresses stay counted. Call in a
    transaction."""
    afresh = (subjects.pair, subjects.device or subjects.pair)
    db.session.execute(
        delete(LoginAttempt).where(
            (LoginAttempt.id.in_(admission.attempt_ids)) | (LoginAttempt.subject.in_(afresh))
        )
    )


def forget_attempt(admission: Admission) -> None:
    """A correct password before its second step: this attempt was no failure, but nothing is
    forgotten beyond it (the code that follows counts as an attempt of its own, and only a
    correct one starts the account afresh). Call in a transaction."""
    db.session.execute(delete(LoginAttempt).where(LoginAttempt.id.in_(admission.attempt_ids)))
