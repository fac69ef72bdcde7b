"""Tenants, users and memberships: validated, and each change written in one transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select
from werkzeug.security import check_password_hash, generate_password_hash

from webapp.catalog.current import current_catalog
from webapp.database import retry_lost_race, utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Membership, Tenant, User
from webapp.services import audit, sessions, tenants
from webapp.services.account_schema import AccountError as AccountError
from webapp.services.account_schema import TenantIn, UserIn, email_of
from webapp.services.audit import Actor
from webapp.services.defaults import materialise_defaults

# scrypt is werkzeug's memory-hard default; naming it pins it against a future default change.
PASSWORD_METHOD = "scrypt"
# The password hash of a user without a password (made by single sign-on or a sign-in link):
# no password matches it until one is set, and the login checks a random hash instead, so that
# it takes as long as for others.
NO_PASSWORD = "!"


class Conflict(AccountError):
    """What is asked for exists already (a tenant's slug)."""


def tenant_by_slug(slug: str) -> Select[Tenant]:
    return select(Tenant).where(Tenant.slug == slug)


def find_tenant(slug: str) -> Tenant:
    tenant = db.session.scalar(tenant_by_slug(slug))
    if tenant is None:
        raise AccountError(f"no tenant with slug {slug!r}")
    return tenant


def create_tenant(slug: str, name: str, time_zone: str = "UTC") -> Tenant:
    """`flask tenant create`."""
    return new_tenant({"slug": slug, "name": name, "time_zone": time_zone}, Actor.cli())


@retry_lost_race  # a parallel create of the same slug: the second try answers Conflict
def new_tenant(data: Mapping[str, Any], actor: Actor) -> Tenant:
    """A tenant from TenantIn's fields, checked, audited, with its default schedules."""
    asked = TenantIn.check(dict(data))
    slug, name, time_zone = asked.slug, asked.name, asked.time_zone
    with write_transaction(db.session) as session:
        if session.scalar(select(Tenant.id).where(Tenant.slug == slug)) is not None:
            raise Conflict({"slug": f"a tenant with slug {slug!r} already exists"})
        tenant = Tenant(slug=slug, name=name, time_zone=time_zone)
        session.add(tenant)
        session.flush()
        audit.record_event(
            session,
            actor,
            "tenant.created",
            ("tenant", tenant.id, tenant.slug),
            tenant_id=tenant.id,
            after={"name": name, "time_zone": time_zone},
        )
        materialise_defaults(session, current_catalog(), utcnow(), [tenant])
    return tenant


@dataclass(frozen=True)
class UserAdded:
    user: User
    created: bool
    joined: bool = False  # the membership is new


@retry_lost_race  # a parallel add of the same email or membership: the second try sees it
def add_user(
    email: str,
    tenant_slug: str,
    role: str,
    password: str | None,
    operator: bool = False,
    actor: Actor | None = None,
) -> UserAdded:
    """Creates a user in a tenant, or gives an existing user a membership in another tenant.

    A new user needs a password; an existing user keeps theirs unless a new one is given (the
    same one again changes nothing: no sessions end, no audit row).
    `operator` also makes the user an operator (audited as `set_operator` is); False leaves
    the flag as it is. `actor`: who asks (default: the command line).
    """
    actor = actor or Actor.cli()
    asked = UserIn.check({"email": email, "role": role, "password": password})
    email, password = asked.email, asked.password
    with write_transaction(db.session):
        tenant = find_tenant(tenant_slug)
        user = db.session.scalar(select(User).where(User.email == email))
        created = user is None
        if user is None:
            if password is None:
                raise AccountError(
                    {"password": f"a password is needed to create the new user {email}"}
                )
            user = User(email=email, password_hash=hash_password(password))
            db.session.add(user)
            db.session.flush()
            record_user_event(user, "user.created", None, actor=actor)
        elif password is not None and not check_password_hash(user.password_hash, password):
            user.password_hash = hash_password(password)
            ended = sessions.end_all(user.id)  # a new password logs the user out everywhere
            record_user_event(
                user, "user.password_changed", None, after={"sessions_ended": ended}, actor=actor
            )
        membership = db.session.scalar(
            select(Membership).where(
                Membership.user_id == user.id, Membership.tenant_id == tenant.id
            )
        )
        if membership is None:
            db.session.add(Membership(user_id=user.id, tenant_id=tenant.id, role=asked.role))
            record_user_event(
                user, "user.added", tenant.id, after={"role": asked.role}, actor=actor
            )
        elif membership.role != asked.role:
            before = {"role": membership.role}
            membership.role = asked.role
            record_user_event(
                user,
                "user.role_changed",
                tenant.id,
                before=before,
                after={"role": asked.role},
                actor=actor,
            )
        if operator:
            change_operator(user, True, actor)
    return UserAdded(user=user, created=created, joined=membership is None)


def set_operator(email: str, operator: bool, actor: Actor) -> User:
    """Grants (or takes away) the operator role: the /operator area and a read-only view of
    every tenant. Audited with tenant_id NULL, since the role spans all tenants."""
    email = email_of(email)
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


def remove_member(email: str, tenant_slug: str, actor: Actor | None = None) -> None:
    """Takes a user out of a tenant and ends all the user's sessions (its pages are open)."""
    email = email_of(email)
    with write_transaction(db.session):
        tenant = find_tenant(tenant_slug)
        user = find_user(email)
        membership = db.session.scalar(
            select(Membership).where(
                Membership.user_id == user.id, Membership.tenant_id == tenant.id
            )
        )
        if membership is None:
            raise AccountError(f"{email} is not a member of tenant {tenant_slug!r}")
        before = {"role": membership.role}
        db.session.delete(membership)
        ended = sessions.end_all(user.id)
        record_user_event(
            user,
            "user.removed",
            tenant.id,
            before=before,
            after={"sessions_ended": ended},
            actor=actor,
        )


def revoke_sessions(email: str, actor: Actor | None = None) -> int:
    """Ends every session of a user; returns how many there were."""
    with write_transaction(db.session):
        user = find_user(email_of(email))
        ended = sessions.end_all(user.id)
        record_user_event(
            user, "user.sessions_revoked", None, after={"sessions_ended": ended}, actor=actor
        )
        return ended


def record_user_event(
    user: User,
    action: str,
    tenant_id: int | None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    actor: Actor | None = None,
) -> None:
    """The audit row of a change to a user made by `actor` (default: the command line), in the
    caller's transaction: in the tenant's log when it concerns a membership, installation-wide
    (tenant None) otherwise."""
    audit.record_event(
        db.session(),
        actor or Actor.cli(),
        action,
        ("user", user.id, user.email),
        tenant_id=tenant_id,
        before=before,
        after=after,
    )


def find_user(email: str) -> User:
    user = db.session.scalar(select(User).where(User.email == email))
    if user is None:
        raise AccountError(f"no user {email!r}")
    return user


def hash_password(password: str) -> str:
    return generate_password_hash(password, method=PASSWORD_METHOD)


def has_password(user: User) -> bool:
    return user.password_hash != NO_PASSWORD


def set_limits(slug: str, limits: Mapping[str, int | None]) -> Tenant:
    """`flask tenant set`: a tenant's own limits (LimitsIn's fields), as the operator API sets
    them (tenants.update_tenant); None restores the operator-wide default."""
    return tenants.update_tenant(find_tenant(slug), limits, Actor.cli())


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
