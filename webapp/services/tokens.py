"""API tokens: create (the secret shown once), list, revoke, and find the token of a request.

A token is `sch_<prefix>_<secret>`: 32 random bytes after a short random prefix. Only the
SHA-256 of the whole token is stored (like a login's, in `sessions`), so a copy of the database
holds no usable token; the prefix names it in the panel, the CLI and the audit log. A tenant's
token acts for its tenant only, reads with the `read` scope and also writes with `write`; an
operator token (no tenant, `write`) acts on the operator API only. Revoked and expired tokens
stay listed, and authenticate nothing.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from webapp.config import settings
from webapp.database import name_problem, write_transaction
from webapp.extensions import db
from webapp.models import Tenant
from webapp.services import audit as audit_events
from webapp.services.audit import Actor
from webapp.services.schedules import lock_tenant
from webapp.services.sessions import token_hash
from webapp.token_models import TOKEN_SCOPES, ApiToken, TokenScope

MAX_NAME = 100
MAX_EXPIRY_DAYS = 3650
PREFIX_BYTES = 4  # 8 hex digits: names a token, decides nothing (the secret does)
SECRET_BYTES = 32


class TokenError(ValueError):
    """Bad input for a token: field name -> message, as ScheduleError."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{field}: {message}" for field, message in self.errors.items()))


def check_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise TokenError({"name": "a name is required"})
    if len(name) > MAX_NAME:
        raise TokenError({"name": f"the name is longer than {MAX_NAME} characters"})
    problem = name_problem(name)
    if problem:
        raise TokenError({"name": f"the name {problem}"})
    return name


def check_scope(scope: str) -> TokenScope:
    for known in TOKEN_SCOPES:
        if scope == known:
            return known
    raise TokenError({"scope": f"{scope!r} is not one of {', '.join(TOKEN_SCOPES)}"})


def check_expiry(days: int | None) -> int | None:
    if days is not None and not 1 <= days <= MAX_EXPIRY_DAYS:
        raise TokenError({"expires_in": f"must be from 1 to {MAX_EXPIRY_DAYS} days"})
    return days


def audit(token: ApiToken, actor: Actor, action: str, now: datetime) -> None:
    """In the tenant's log; an operator token's in the installation's (tenant None)."""
    created = {"prefix": token.prefix, "scope": token.scope, "kind": token.kind}
    audit_events.record_event(
        db.session(),
        actor,
        action,
        ("token", token.id, token.name),
        tenant_id=token.tenant_id,
        after=created if action == "token.created" else None,
        at=now,
    )


def create_token(
    tenant: Tenant,
    name: str,
    scope: str,
    expires_in_days: int | None,
    actor: Actor,
    now: datetime,
) -> tuple[ApiToken, str]:
    """A new token of the tenant and its secret, which is never stored nor shown again."""
    return new_token(tenant, check_name(name), check_scope(scope), expires_in_days, actor, now)


def create_operator_token(
    name: str, expires_in_days: int | None, actor: Actor, now: datetime
) -> tuple[ApiToken, str]:
    """A new operator token (the operator API, every tenant) and its secret, shown once."""
    return new_token(None, name, "write", expires_in_days, actor, now)


def new_token(
    tenant: Tenant | None,
    name: str,
    scope: TokenScope,
    expires_in_days: int | None,
    actor: Actor,
    now: datetime,
) -> tuple[ApiToken, str]:
    """A tenant's token, or with `tenant` None an operator's, and its secret."""
    name = check_name(name)
    check_expiry(expires_in_days)
    prefix = secrets.token_hex(PREFIX_BYTES)
    secret = f"sch_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    with write_transaction(db.session) as session:
        if tenant is not None:
            check_room(session, tenant, now)
        token = ApiToken(
            kind="tenant" if tenant is not None else "operator",
            tenant_id=tenant.id if tenant is not None else None,
            name=name,
            scope=scope,
            prefix=prefix,
            token_hash=token_hash(secret),
            created_by=actor.user_id,
            created_by_label=actor.label,
            created_at=now,
            expires_at=now + timedelta(days=expires_in_days) if expires_in_days else None,
        )
        db.session.add(token)
        db.session.flush()
        audit(token, actor, "token.created", now)
    return token, secret


def check_room(session: Session, tenant: Tenant, now: datetime) -> None:
    """TokenError when the tenant has SCHEDULER_MAX_TOKENS active tokens already. Counted
    under the tenant's row lock (lock_tenant), so that parallel requests cannot all pass the
    same count."""
    lock_tenant(session, tenant)
    active = select(func.count()).where(
        ApiToken.tenant_id == tenant.id,
        ApiToken.revoked_at.is_(None),
        (ApiToken.expires_at.is_(None)) | (ApiToken.expires_at > now),
    )
    limit = settings().SCHEDULER_MAX_TOKENS
    if (session.scalar(active) or 0) >= limit:
        raise TokenError(
            {
                "name": f"the tenant has {limit} active tokens, the most it may have "
                "(SCHEDULER_MAX_TOKENS): revoke one it no longer needs first"
            }
        )


def tenant_tokens(tenant: Tenant) -> list[ApiToken]:
    """The tenant's tokens, newest first, revoked and expired ones included."""
    query = select(ApiToken).where(ApiToken.tenant_id == tenant.id)
    return list(db.session.scalars(query.order_by(ApiToken.id.desc())))


def operator_tokens() -> list[ApiToken]:
    """The operator tokens, newest first, revoked and expired ones included."""
    query = select(ApiToken).where(ApiToken.kind == "operator")
    return list(db.session.scalars(query.order_by(ApiToken.id.desc())))


def find_by_prefix(prefix: str) -> ApiToken:
    token = db.session.scalar(select(ApiToken).where(ApiToken.prefix == prefix.strip()))
    if token is None:
        raise TokenError({"prefix": f"no token with prefix {prefix.strip()!r}"})
    return token


def revoke_token(token: ApiToken, actor: Actor, now: datetime) -> bool:
    """Revokes the token at once; False if it already was."""
    with write_transaction(db.session):
        if token.revoked_at is not None:
            return False
        token.revoked_at = now
        audit(token, actor, "token.revoked", now)
    return True


def authenticate(secret: str, now: datetime) -> ApiToken | None:
    """The usable token whose secret this is, or None (unknown, revoked or expired)."""
    if not secret.startswith("sch_") or len(secret) > 200 or "\x00" in secret:
        return None
    token = db.session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash(secret)))
    if token is None or not token.usable(now):
        return None
    return token


def count_request(token: ApiToken, now: datetime, limit: int) -> int | None:
    """Counts a request of the token in this minute's window and records its last use, in a
    transaction of its own on the request's one connection (committed at once: a GET never
    commits, and the token's row must not stay locked while the request works). Returns the
    seconds to wait when the token has made more than `limit` requests this minute (0 or less:
    no limit), else None."""
    window = now.replace(second=0, microsecond=0)
    same_window = ApiToken.window_start == window
    with write_transaction(db.session) as session:
        count = session.scalar(
            update(ApiToken)
            .where(ApiToken.id == token.id)
            .values(
                window_count=case((same_window, ApiToken.window_count + 1), else_=1),
                window_start=window,
                last_used_at=now,
            )
            .returning(ApiToken.window_count)
            .execution_options(synchronize_session=False)
        )
    if limit > 0 and count is not None and count > limit:
        return max(1, math.ceil((window + timedelta(minutes=1) - now).total_seconds()))
    return None
