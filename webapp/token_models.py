"""The tables of API tokens: a tenant's tokens and the operator's, and the Idempotency-Keys of
their POSTs.

Beside `models.py` (which is at its size bound) and part of the same foundation: the names are
a public contract as there."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal, get_args

from sqlalchemy import CheckConstraint, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from webapp.database import UTCDateTime, utcnow
from webapp.models import NEVER_REUSE_IDS, Tenant, one_of

if TYPE_CHECKING:
    from webapp.extensions import Base as Model
else:
    from webapp.extensions import db

    Model = db.Model

TokenScope = Literal["read", "write"]
TOKEN_SCOPES: tuple[TokenScope, ...] = get_args(TokenScope)
# tenant: acts for its tenant on /api/v1 (never on /api/v1/admin); operator: acts for the
# installation on /api/v1/admin (never on the tenant endpoints), has no tenant and writes.
TokenKind = Literal["tenant", "operator"]
TOKEN_KINDS: tuple[TokenKind, ...] = get_args(TokenKind)


class ApiToken(Model):
    """An API token: a tenant's, or the operator's (`kind`). The secret is shown once; this row
    keeps only its SHA-256 and the short prefix by which the panel, the CLI and the audit log
    name it."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint(one_of("scope", TOKEN_SCOPES), name="scope"),
        CheckConstraint(one_of("kind", TOKEN_KINDS), name="kind"),
        CheckConstraint(
            "(kind = 'tenant' AND tenant_id IS NOT NULL)"
            " OR (kind = 'operator' AND tenant_id IS NULL)",
            name="kind_tenant",
        ),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[TokenKind] = mapped_column(String(16), default="tenant", server_default="tenant")
    # NULL for an operator token only.
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100))
    scope: Mapped[TokenScope] = mapped_column(String(8))
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # Who made it, readable after the user is gone: an email, "cli", or an operator token.
    created_by_label: Mapped[str] = mapped_column(String(254))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The rate limit's window: the minute it started and the requests counted in it.
    window_start: Mapped[datetime | None] = mapped_column(UTCDateTime)
    window_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    tenant: Mapped[Tenant | None] = relationship()

    @property
    def is_operator(self) -> bool:
        return self.kind == "operator"

    def usable(self, now: datetime) -> bool:
        """Neither revoked nor expired."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def state(self, now: datetime) -> str:
        """active, expired or revoked: what the lists say of a token."""
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.usable(now) else "expired"


class ApiIdempotencyKey(Model):
    """A POST sent with an `Idempotency-Key`: its answer, replayed to a retry with the same key
    for 24 hours. A row without a status is a request still being handled."""

    __tablename__ = "api_idempotency_keys"
    __table_args__ = (UniqueConstraint("token_id", "key"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    # What the key was first used for: the same key with another request is refused.
    request_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[int | None] = mapped_column(Integer)
    body: Mapped[str | None] = mapped_column(Text)
    location: Mapped[str | None] = mapped_column(String(200))
    etag: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
