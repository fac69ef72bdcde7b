"""The operator API's documents: tenants, users and memberships, a tenant's tokens. The
inputs are the command line's models where there is one (TenantIn, LimitsIn, UserIn: the same
checks and messages); these add the outputs, the patches and the query strings."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from pydantic import BaseModel, Field, StrictInt, StrictStr

from webapp.api.schemas import PageQuery, Strict
from webapp.models import Role, Tenant, User
from webapp.services.account_schema import LimitsIn
from webapp.services.tenants import TenantContents
from webapp.token_models import ApiToken, TokenKind, TokenScope

LIMIT_FIELDS = tuple(LimitsIn.model_fields)
TENANT_FIELDS = ("slug", "name", "time_zone", *LIMIT_FIELDS)


def tenant_version(tenant: Tenant) -> str:
    """A digest of what the operator may change in the tenant: its ETag."""
    fields = [tenant.id, {name: getattr(tenant, name) for name in TENANT_FIELDS}]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


class TenantOut(BaseModel):
    """A tenant. A limit that is null is the installation's default (the SCHEDULER_ setting)."""

    id: int
    slug: str
    name: str
    time_zone: str
    max_schedules: int | None = Field(description="Most schedules; null: SCHEDULER_MAX_SCHEDULES")
    min_interval_seconds: int | None = Field(
        description="Fewest seconds between fires; null: SCHEDULER_MIN_INTERVAL"
    )
    max_running: int | None = Field(
        description="Most runs running at once; null: SCHEDULER_MAX_RUNNING"
    )
    retention_days: int | None = Field(
        description="Days of run history kept; null: SCHEDULER_RUN_RETENTION_DAYS"
    )
    jitter_seconds: int | None = Field(
        description="Default spread of a run's start after its fire time; null: none"
    )
    created_at: datetime

    @classmethod
    def of(cls, tenant: Tenant) -> TenantOut:
        fields = {name: getattr(tenant, name) for name in TENANT_FIELDS}
        return cls(id=tenant.id, created_at=tenant.created_at, **fields)


class TenantPage(BaseModel):
    items: list[TenantOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null: last")


class TenantPatch(Strict):
    """Only the fields to change: the name, the zone of new schedules, the limits (null: the
    installation's default). The slug never changes (the URLs and the host app name it)."""

    name: StrictStr | None = None
    time_zone: StrictStr | None = None
    max_schedules: StrictInt | None = None
    min_interval_seconds: StrictInt | None = None
    max_running: StrictInt | None = None
    retention_days: StrictInt | None = None
    jitter_seconds: StrictInt | None = None


class DeleteQuery(Strict):
    cascade: bool = Field(
        False,
        description="true: delete the tenant with everything it holds (the answer counts it); "
        "false: only an empty tenant (409 otherwise)",
    )


class TenantDeletedOut(BaseModel):
    """What went with the tenant."""

    slug: str
    removed: TenantContents


class MembershipOut(BaseModel):
    tenant: str = Field(description="The tenant's slug")
    role: Role


class UserOut(BaseModel):
    """A user and the tenants they belong to."""

    id: int
    email: str
    is_operator: bool
    two_factor: bool = Field(description="Whether the user signs in with a second factor")
    created_at: datetime
    last_login_at: datetime | None
    memberships: list[MembershipOut]

    @classmethod
    def of(cls, user: User) -> UserOut:
        return cls(
            id=user.id,
            email=user.email,
            is_operator=bool(user.is_operator),
            two_factor=user.two_factor_enabled_at is not None,
            created_at=user.created_at,
            last_login_at=user.last_login_at,
            memberships=[
                MembershipOut.model_validate({"tenant": m.tenant.slug, "role": m.role})
                for m in sorted(user.memberships, key=lambda m: m.tenant.slug)
            ],
        )


class UserPage(BaseModel):
    items: list[UserOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null: last")


class UserQuery(PageQuery):
    email: str | None = Field(None, max_length=254, description="Only this user (exact email)")


class MemberOut(BaseModel):
    """A user's membership of the tenant."""

    user_id: int
    email: str
    role: Role

    @classmethod
    def of(cls, user_id: int, email: str, role: str) -> MemberOut:
        return cls.model_validate({"user_id": user_id, "email": email, "role": role})


class MemberPage(BaseModel):
    items: list[MemberOut]


class RolePatch(Strict):
    role: Role


class SessionsRevokedOut(BaseModel):
    user_id: int
    sessions_ended: int


class TokenIn(Strict):
    """A token of the tenant, made on its behalf."""

    name: StrictStr
    scope: TokenScope
    expires_in: StrictInt | None = Field(None, description="Days until it stops working")


class TokenOut(BaseModel):
    """An API token (never its secret)."""

    id: int
    prefix: str = Field(description="What lists and the audit log name it by")
    kind: TokenKind
    name: str
    scope: TokenScope
    state: str = Field(description="active, expired or revoked")
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, token: ApiToken, now: datetime) -> TokenOut:
        return cls(
            id=token.id,
            prefix=token.prefix,
            kind=token.kind,
            name=token.name,
            scope=token.scope,
            state=token.state(now),
            created_by=token.created_by_label,
            created_at=token.created_at,
            expires_at=token.expires_at,
            last_used_at=token.last_used_at,
            revoked_at=token.revoked_at,
        )


class TokenCreatedOut(TokenOut):
    secret: str = Field(description="The token itself: shown this once, never stored")


class TokenPage(BaseModel):
    items: list[TokenOut]


class SignInLinkOut(BaseModel):
    """A one-time sign-in link: send the person's browser there (a redirect, or a frame's src)."""

    url: str = Field(description="Works once, until expires_at")
    expires_at: datetime = Field(description="SCHEDULER_SIGN_IN_LINK_TTL seconds after it was made")
