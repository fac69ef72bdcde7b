"""The table of one-time sign-in links (services.sign_in_links).

Beside `models.py` (which is at its size bound) and part of the same foundation: the names are
a public contract as there."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from webapp.database import UTCDateTime, utcnow
from webapp.models import MAX_URL, NEVER_REUSE_IDS, ROLES, Tenant, one_of

if TYPE_CHECKING:
    from webapp.extensions import Base as Model
else:
    from webapp.extensions import db

    Model = db.Model


class SignInLink(Model):
    """A link that signs one person into one tenant's panel, once, until it expires. The URL
    carries a random token; this row only its SHA-256, with everything the link grants (the
    tenant, the email, the role, where "Back to" leads), so nothing in the URL can change it."""

    __tablename__ = "sign_in_links"
    __table_args__ = (CheckConstraint(one_of("role", ROLES), name="role"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    email: Mapped[str] = mapped_column(String(254))  # stored lower-case, as users.email
    role: Mapped[str] = mapped_column(String(16))
    return_url: Mapped[str | None] = mapped_column(String(MAX_URL))
    # Whether the email was a member of the tenant when the link was made: a link made for a
    # member who is removed before it is opened does not make them a member again.
    for_member: Mapped[bool] = mapped_column(Boolean)
    # Who made it, as the audit log names an actor: the operator token.
    created_by_label: Mapped[str] = mapped_column(String(254))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    tenant: Mapped[Tenant] = relationship()
