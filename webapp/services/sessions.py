"""Logins that the server can end: start, find, end one, end all of a user's.

The session cookie carries a random token; `user_sessions` keeps only its SHA-256. A session
ends when it is idle for SCHEDULER_SESSION_IDLE_TIMEOUT seconds, when it is older than
SCHEDULER_SESSION_MAX_AGE, at logout, and for every session of a user whose password changes,
who leaves a tenant, or whose sessions an operator revokes.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import contains_eager

from webapp.config import Settings
from webapp.extensions import db
from webapp.models import Membership, Tenant, User, UserSession

# last_seen_at is written at most this often: an idle timeout of hours needs no write per request.
TOUCH_INTERVAL = timedelta(minutes=1)


@dataclass(frozen=True)
class Lifetimes:
    idle: timedelta
    absolute: timedelta

    @classmethod
    def of(cls, settings: Settings) -> Lifetimes:
        return cls(
            idle=timedelta(seconds=settings.SCHEDULER_SESSION_IDLE_TIMEOUT),
            absolute=timedelta(seconds=settings.SCHEDULER_SESSION_MAX_AGE),
        )


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def start(user: User, now: datetime, lifetimes: Lifetimes) -> User:
    """Records a new login of `user` (in the caller's transaction), and forgets the user's
    sessions that can no longer be used; returns the user holding the new session's token."""
    db.session.execute(
        delete(UserSession).where(
            UserSession.user_id == user.id,
            (UserSession.last_seen_at < now - lifetimes.idle)
            | (UserSession.created_at < now - lifetimes.absolute),
        )
    )
    token = secrets.token_urlsafe(32)
    db.session.add(
        UserSession(user_id=user.id, token_hash=token_hash(token), created_at=now, last_seen_at=now)
    )
    return user.holding(token)


# The login's one statement (see find), built once: building a select with its joins and
# loader options costs about as much as the round trip that runs it, on every request.
FIND = (
    select(UserSession.id, UserSession.created_at, UserSession.last_seen_at, User)
    .join(User, User.id == UserSession.user_id)
    .outerjoin(Membership, Membership.user_id == User.id)
    .outerjoin(Tenant, Tenant.id == Membership.tenant_id)
    .options(contains_eager(User.memberships).contains_eager(Membership.tenant))
    .where(UserSession.token_hash == bindparam("token_hash"))
)


def find(token: str, now: datetime, lifetimes: Lifetimes) -> User | None:
    """The user of a live session, or None (unknown, ended, idle too long or too old).

    One statement loads the session, its user and the user's memberships with their tenants
    (`user.memberships`): every page of the panel shows which tenant is current and the others
    the user may switch to, so a request needs no other query to know who asks for what."""
    found = db.session.execute(FIND, {"token_hash": token_hash(token)}).unique().one_or_none()
    if found is None:
        return None
    session_id, created_at, last_seen_at, user = found
    if now - last_seen_at > lifetimes.idle or now - created_at > lifetimes.absolute:
        return None
    if now - last_seen_at > TOUCH_INTERVAL:
        # Its own short transaction on its own connection: the request's session may be
        # reading, and a page view must not hold SQLite's write lock.
        with db.engine.begin() as connection:
            connection.execute(
                update(UserSession).where(UserSession.id == session_id).values(last_seen_at=now)
            )
    return user.holding(token)


def end(token: str) -> None:
    """Ends one session (logout). Call in a transaction."""
    db.session.execute(delete(UserSession).where(UserSession.token_hash == token_hash(token)))


def end_all(user_id: int) -> int:
    """Ends every session of a user; returns how many there were. Call in a transaction."""
    result = db.session.execute(delete(UserSession).where(UserSession.user_id == user_id))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
