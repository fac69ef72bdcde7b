"""Single sign-on's account side: which user an identity provider's verified email is, the
users it may create (SCHEDULER_OIDC_CREATE_USERS) and the audit of each sign-in.

The protocol (discovery, state, nonce, PKCE, the ID token's checks) is `webapp/web/sso.py`'s;
what reaches here is an identity whose token passed them. Nothing here talks to the network:
the provider's answers are in before the one transaction below starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import Membership, Role, Tenant, User
from webapp.services import audit
from webapp.services.account_schema import AccountError, email_of
from webapp.services.accounts import NO_PASSWORD
from webapp.services.audit import Actor

# The actor of what single sign-on does on its own: a user it creates.
SINGLE_SIGN_ON = Actor(user_id=None, label="single sign-on")


class SignInRefused(Exception):
    """A sign-in that must not happen; the message is for the person signing in."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in: its issuer, the subject it knows them by, their email."""

    issuer: str
    subject: str
    email: str

    @classmethod
    def of(cls, issuer: str, claims: dict[str, Any]) -> Identity:
        """From the ID token's (and the userinfo endpoint's) claims: only an email that the
        provider says it verified (`email_verified` true) names a user here."""
        email = claims.get("email")
        if not isinstance(email, str) or not email:
            raise SignInRefused(
                "The identity provider did not tell us your email address, so we cannot tell "
                "which account is yours. Ask your administrator to release the email claim."
            )
        if claims.get("email_verified") not in (True, "true"):
            raise SignInRefused(
                f"The identity provider has not verified the email address {email}. Verify "
                "it there first, then sign in again."
            )
        try:
            email = email_of(email)
        except AccountError:
            raise SignInRefused(f"{email!r} is not an email address we can use.") from None
        return cls(issuer=issuer, subject=str(claims.get("sub", "")), email=email)


def account_for(identity: Identity, new_users: tuple[str, Role] | None) -> User:
    """The user with the identity's verified email, in one transaction with the sign-in's audit
    rows. Without an account: created with the membership `new_users` names (no password), or
    refused when single sign-on creates no users; a refusal writes nothing."""
    with write_transaction(db.session):
        user = db.session.scalar(select(User).where(User.email == identity.email))
        if user is None:
            user = create_user(identity, new_users)
        record_sign_in(user, identity)
    return user


def create_user(identity: Identity, new_users: tuple[str, Role] | None) -> User:
    """A new user for the identity (in the caller's transaction), a member of the tenant that
    SCHEDULER_OIDC_CREATE_USERS names; audited as the command line's `user create` is."""
    if new_users is None:
        raise SignInRefused(
            f"There is no account for {identity.email} here. Ask an administrator of your "
            "tenant to add you, then sign in again."
        )
    slug, role = new_users
    tenant = db.session.scalar(select(Tenant).where(Tenant.slug == slug))
    if tenant is None:
        raise SignInRefused(
            f"There is no account for {identity.email} here, and the tenant that new accounts "
            f"join ({slug!r}, SCHEDULER_OIDC_CREATE_USERS) does not exist. Tell your "
            "administrator.",
            status=409,
        )
    user = User(email=identity.email, password_hash=NO_PASSWORD)
    db.session.add(user)
    db.session.flush()
    db.session.add(Membership(user_id=user.id, tenant_id=tenant.id, role=role))
    subject = ("user", user.id, user.email)
    audit.record_event(db.session(), SINGLE_SIGN_ON, "user.created", subject, tenant_id=None)
    audit.record_event(
        db.session(),
        SINGLE_SIGN_ON,
        "user.added",
        subject,
        tenant_id=tenant.id,
        after={"role": role},
    )
    db.session.refresh(user)  # its memberships, for the sign-in's audit rows
    return user


def record_sign_in(user: User, identity: Identity) -> None:
    """`user.signed_in` in the audit log of each tenant the user belongs to (installation-wide
    without one), naming the provider and its subject."""
    after = {"method": "single sign-on", "issuer": identity.issuer, "subject": identity.subject}
    tenant_ids: list[int | None] = [membership.tenant_id for membership in user.memberships]
    for tenant_id in tenant_ids or [None]:
        audit.record_event(
            db.session(),
            Actor.for_user(user),
            "user.signed_in",
            ("user", user.id, user.email),
            tenant_id=tenant_id,
            after=after,
        )
