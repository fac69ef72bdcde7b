"""Tenants, users and memberships: validated, and each change written in one transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import delete, select
from werkzeug.security import generate_password_hash

from webapp import cron
from webapp.catalog.current import current_catalog
from webapp.config import RETENTION_DAYS_RANGE
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import ROLES, Membership, Tenant, User
from webapp.scheduler.jitter import MAX_JITTER
from webapp.services import audit, sessions
from webapp.services.audit import Actor
from webapp.services.defaults import materialise_defaults

SLUG_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
EMAIL_PATTERN = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
MIN_PASSWORD_LENGTH = 10
MAX_INTEGER = 2**31 - 1  # PostgreSQL integer columns
# scrypt is werkzeug's memory-hard default; naming it pins it against a future default change.
PASSWORD_METHOD = "scrypt"


class AccountError(ValueError):
    """Bad input for a tenant or user change; the message is shown to the operator as is."""


def known_time_zones() -> frozenset[str]:
    # The cron module's list: the tick checks a stored zone against the same one.
    return cron.known_time_zones()


def check_time_zone(name: object) -> str:
    """Accepts a real IANA zone name only (not the host's `localtime` or a `posix/` alias)."""
    if not isinstance(name, str):
        raise AccountError(f"time zone {name!r} must be text")
    if name not in known_time_zones():
        raise AccountError(f"unknown time zone {name!r}")
    return name


def check_slug(slug: str) -> str:
    if not SLUG_PATTERN.fullmatch(slug):
        raise AccountError(
            f"invalid slug {slug!r}: use 1-63 lower-case letters, digits and hyphens, "
            "starting and ending with a letter or digit"
        )
    return slug


def normalise_email(email: str) -> str:
    email = email.strip().lower()
    if len(email) > 254 or not EMAIL_PATTERN.fullmatch(email) or "\x00" in email:
        raise AccountError(f"invalid email address {email!r}")
    return email


def check_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"password too short: use at least {MIN_PASSWORD_LENGTH} characters")
    return password


def find_tenant(slug: str) -> Tenant:
    tenant = db.session.scalar(select(Tenant).where(Tenant.slug == slug))
    if tenant is None:
        raise AccountError(f"no tenant with slug {slug!r}")
    return tenant


def create_tenant(slug: str, name: str, time_zone: str = "UTC") -> Tenant:
    check_slug(slug)
    check_time_zone(time_zone)
    name = name.strip()
    if not name:
        raise AccountError("the tenant name must not be empty")
    if len(name) > 200 or "\x00" in name:
        raise AccountError("the tenant name must be at most 200 characters, without NUL")
    with write_transaction(db.session) as session:
        if session.scalar(select(Tenant.id).where(Tenant.slug == slug)) is not None:
            raise AccountError(f"a tenant with slug {slug!r} already exists")
        tenant = Tenant(slug=slug, name=name, time_zone=time_zone)
        session.add(tenant)
        session.flush()
        materialise_defaults(session, current_catalog(), utcnow(), [tenant])
    return tenant


@dataclass(frozen=True)
class UserAdded:
    user: User
    created: bool


def add_user(
    email: str, tenant_slug: str, role: str, password: str | None, operator: bool = False
) -> UserAdded:
    """Creates a user in a tenant, or gives an existing user a membership in another tenant.

    A new user needs a password; an existing user keeps theirs unless a new one is given.
    `operator` also makes the user an operator (audited as `set_operator` is); False leaves
    the flag as it is.
    """
    email = normalise_email(email)
    if role not in ROLES:
        raise AccountError(f"invalid role {role!r}: use one of {', '.join(ROLES)}")
    if password is not None:
        check_password(password)
    with write_transaction(db.session):
        tenant = find_tenant(tenant_slug)
        user = db.session.scalar(select(User).where(User.email == email))
        created = user is None
        if user is None:
            if password is None:
                raise AccountError(f"a password is needed to create the new user {email}")
            user = User(email=email, password_hash=hash_password(password))
            db.session.add(user)
            db.session.flush()
        elif password is not None:
            user.password_hash = hash_password(password)
            sessions.end_all(user.id)  # a new password logs the user out everywhere
        membership = db.session.scalar(
            select(Membership).where(
                Membership.user_id == user.id, Membership.tenant_id == tenant.id
            )
        )
        if membership is None:
            db.session.add(Membership(user_id=user.id, tenant_id=tenant.id, role=role))
        else:
            membership.role = role
        if operator:
            change_operator(user, True, Actor.cli())
    return UserAdded(user=user, created=created)


def set_operator(email: str, operator: bool, actor: Actor) -> User:
    """Grants (or takes away) the operator role: the /operator area and a read-only view of
    every tenant. Audited with tenant_id NULL, since the role spans all tenants."""
    email = normalise_email(email)
    with write_transaction(db.session):
        user = find_user(email)
        change_operator(user, operator, actor)
    return user


def change_operator(user: User, operator: bool, actor: Actor) -> None:
    """Sets the flag in the caller's transaction, with its audit row (none when unchanged)."""
    was = bool(user.is_operator)
    if was == operator:
        return
    user.is_operator = operator
    audit.record_event(
        db.session(),
        actor,
        "user.set_operator",
        ("user", user.id, user.email),
        tenant_id=None,
        before={"is_operator": was},
        after={"is_operator": operator},
    )


def remove_member(email: str, tenant_slug: str) -> None:
    """Takes a user out of a tenant and ends all the user's sessions (its pages are open)."""
    email = normalise_email(email)
    with write_transaction(db.session):
        tenant = find_tenant(tenant_slug)
        user = find_user(email)
        removed = db.session.execute(
            delete(Membership).where(
                Membership.user_id == user.id, Membership.tenant_id == tenant.id
            )
        )
        if not removed.rowcount:  # type: ignore[attr-defined]
            raise AccountError(f"{email} is not a member of tenant {tenant_slug!r}")
        sessions.end_all(user.id)


def revoke_sessions(email: str) -> int:
    """Ends every session of a user; returns how many there were."""
    with write_transaction(db.session):
        return sessions.end_all(find_user(normalise_email(email)).id)


def find_user(email: str) -> User:
    user = db.session.scalar(select(User).where(User.email == email))
    if user is None:
        raise AccountError(f"no user {email!r}")
    return user


def hash_password(password: str) -> str:
    return generate_password_hash(password, method=PASSWORD_METHOD)


def check_retention_days(days: int) -> int:
    low, high = RETENTION_DAYS_RANGE
    if not low <= days <= high:
        raise AccountError(f"--retention-days must be from {low} to {high} days, or 'default'")
    return days


def check_max_running(runs: int) -> int:
    # 0 would never start the tenant's runs: pausing its schedules says that honestly.
    if not 1 <= runs <= MAX_INTEGER:
        raise AccountError(
            f"--max-running must be a whole number of runs from 1 to {MAX_INTEGER}, or 'default'"
        )
    return runs


def check_jitter_default(seconds: int) -> int:
    if not 0 <= seconds <= MAX_JITTER:
        raise AccountError(
            f"--jitter-seconds must be from 0 to {MAX_JITTER} s, or 'default' (a schedule's "
            "jitter is also at most half its shortest interval between fires: the tick "
            "shortens the default for such schedules)"
        )
    return seconds


def set_limits(
    slug: str,
    max_schedules: int | None,
    min_interval: int | None,
    *,
    retention_days: int | None,
    max_running: int | None = None,
    jitter_seconds: int | None = None,
) -> Tenant:
    """Overrides the operator-wide quotas, run retention and cap on running runs for one
    tenant, and its default jitter, in one transaction; None restores the default
    (SCHEDULER_MAX_SCHEDULES, SCHEDULER_MIN_INTERVAL, SCHEDULER_RUN_RETENTION_DAYS,
    SCHEDULER_MAX_RUNNING; no jitter)."""
    for label, value in (("--max-schedules", max_schedules), ("--min-interval", min_interval)):
        if value is not None and not 0 <= value <= MAX_INTEGER:
            raise AccountError(f"{label} must be between 0 and {MAX_INTEGER}")
    if retention_days is not None:
        check_retention_days(retention_days)
    if max_running is not None:
        check_max_running(max_running)
    if jitter_seconds is not None:
        check_jitter_default(jitter_seconds)
    after = {
        "max_schedules": max_schedules,
        "min_interval_seconds": min_interval,
        "retention_days": retention_days,
        "max_running": max_running,
        "jitter_seconds": jitter_seconds,
    }
    with write_transaction(db.session):
        tenant = find_tenant(slug)
        before = {name: getattr(tenant, name) for name in after}
        changed_before, changed_after = audit.changed_fields(before, after)
        if not changed_after:
            return tenant
        for name, value in after.items():
            setattr(tenant, name, value)
        # The tenant's admins see in their audit log that the operator changed their limits.
        audit.record_event(
            db.session(),
            Actor.cli(),
            "tenant.limits_changed",
            ("tenant", tenant.id, tenant.slug),
            tenant_id=tenant.id,
            before=changed_before,
            after=changed_after,
        )
    return tenant


def list_tenants() -> list[Tenant]:
    return list(db.session.scalars(select(Tenant).order_by(Tenant.slug)))


def list_members(tenant_slug: str) -> list[tuple[User, str]]:
    tenant = find_tenant(tenant_slug)
    rows = db.session.execute(
        select(User, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.tenant_id == tenant.id)
        .order_by(User.email)
    )
    return [(user, role) for user, role in rows]
