"""One-time sign-in links: the host application (with an operator token) asks for a link that
signs one person into one tenant's panel; opening it signs them in, creating the user and the
membership on first use (just in time, with the role asked for).

A link is a random token in a URL; `sign_in_links` keeps only its SHA-256, beside everything the
link grants (tenant, email, role, return URL), so nothing in the URL can be edited into another
grant. It works once (a conditional UPDATE marks it used: two parallel uses cannot both pass),
until SCHEDULER_SIGN_IN_LINK_TTL seconds after it was made. A refused link writes nothing.

The person's identity is the host's word: a user made by a link has no password (they cannot log
in with one until one is set: `flask user create` with `--password-stdin`), and a login by link
asks for no second factor (the host is the factor, web.sign_in tells the panel so). A link can
never sign in an operator: the operator area is not the host's to hand out.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import StrictStr, field_validator
from sqlalchemy import delete, select, update

from webapp.config import Settings
from webapp.database import retry_lost_race, write_transaction
from webapp.extensions import db
from webapp.models import Membership, Role, Tenant, User
from webapp.services import audit, sessions
from webapp.services.account_schema import AccountError, Checked, UserIn
from webapp.services.accounts import NO_PASSWORD
from webapp.services.audit import Actor
from webapp.services.sessions import token_hash
from webapp.sign_in_models import SignInLink

MAX_RETURN_URL = 2000
# A used or expired link's row is kept this long, so that opening it late says why it is
# refused; then the next link made deletes it.
KEEP_SPENT = timedelta(days=1)


class LinkIn(Checked):
    """What a sign-in link is asked for (POST /api/v1/admin/sign-in-links): the tenant's slug,
    the person's email and role, and where the panel's "Back to" leads."""

    tenant: StrictStr
    email: StrictStr
    role: Role
    return_url: StrictStr | None = None

    @field_validator("email")
    @classmethod
    def check_email(cls, email: str) -> str:
        return UserIn.check_email(email)  # the one email rule


def return_url_problem(url: str, hosts: list[str]) -> str | None:
    """Why `url` may not be a link's return URL, or None: an absolute http(s) URL, with no user
    name, on a host of SCHEDULER_RETURN_URL_HOSTS (`javascript:`, `//evil`, other hosts: no)."""
    if len(url) > MAX_RETURN_URL:
        return f"must be at most {MAX_RETURN_URL} characters"
    if any(ord(character) <= 0x20 or ord(character) == 0x7F for character in url) or "\\" in url:
        return "must not contain spaces, control characters or backslashes"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not host:
        return "must be an absolute http or https URL (https://app.example.com/account)"
    if parts.username is not None or parts.password is not None:
        return "must not contain a user name or password"
    allowed = {name.lower() for name in hosts}
    if not allowed:
        return "is not allowed: SCHEDULER_RETURN_URL_HOSTS names no host"
    if host not in allowed:
        return f"host {host} is not in SCHEDULER_RETURN_URL_HOSTS"
    return None


def return_host(url: str) -> str:
    """What "Back to <host>" names: the return URL's host, with its port if it has one."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


@dataclass(frozen=True)
class MadeLink:
    token: str  # in the URL only; the row keeps its hash
    link: SignInLink


def create_link(
    data: Mapping[str, object], made_by: Actor, now: datetime, settings: Settings
) -> MadeLink:
    """A new link for `data` (LinkIn's fields), or AccountError by field: unknown tenant, an
    operator's email, a return URL that is not allowed. Also deletes links spent a while ago."""
    asked = LinkIn.check(dict(data))
    if asked.return_url is not None:
        wrong = return_url_problem(asked.return_url, settings.SCHEDULER_RETURN_URL_HOSTS)
        if wrong:
            raise AccountError({"return_url": wrong})
    with write_transaction(db.session):
        tenant = db.session.scalar(select(Tenant).where(Tenant.slug == asked.tenant))
        if tenant is None:
            raise AccountError({"tenant": f"no tenant with slug {asked.tenant!r}"})
        user = db.session.scalar(select(User).where(User.email == asked.email))
        if user is not None and user.is_operator:
            raise AccountError(
                {"email": f"{asked.email} is an operator: a link cannot sign in one"}
            )
        db.session.execute(delete(SignInLink).where(SignInLink.expires_at < now - KEEP_SPENT))
        token = secrets.token_urlsafe(32)
        link = SignInLink(
            tenant_id=tenant.id,
            token_hash=token_hash(token),
            email=asked.email,
            role=asked.role,
            return_url=asked.return_url,
            for_member=user is not None and membership_of(user, tenant) is not None,
            created_by_label=made_by.label,
            created_at=now,
            expires_at=now + timedelta(seconds=settings.SCHEDULER_SIGN_IN_LINK_TTL),
        )
        db.session.add(link)
    return MadeLink(token=token, link=link)


class LinkRefused(Exception):
    """Why a link cannot sign anyone in: the page's status, title and what to do."""

    def __init__(self, status: int, title: str, text: str) -> None:
        super().__init__(title)
        self.status = status
        self.title = title
        self.text = text


def not_valid() -> LinkRefused:
    return LinkRefused(
        404,
        "This sign-in link is not valid",
        "It may have been copied incompletely or changed. Go back to the application that sent "
        "you here and open the panel from there again.",
    )


def already_used() -> LinkRefused:
    return LinkRefused(
        410,
        "This sign-in link was already used",
        "A sign-in link works once. Go back to the application that sent you here and open the "
        "panel from there again for a new one.",
    )


def membership_of(user: User, tenant: Tenant) -> Membership | None:
    return db.session.scalar(
        select(Membership).where(Membership.user_id == user.id, Membership.tenant_id == tenant.id)
    )


def usable_link(slug: str, token: str, now: datetime) -> SignInLink:
    """The link of `token` if it may sign its person into tenant `slug` now, else LinkRefused:
    unknown or changed (404), for another tenant (404, as unknown), used or expired (410), for
    an operator or for a member removed since it was made (403). Reads only."""
    link = db.session.scalar(select(SignInLink).where(SignInLink.token_hash == token_hash(token)))
    if link is None or link.tenant.slug != slug:
        raise not_valid()
    if link.used_at is not None:
        raise already_used()
    if link.expires_at <= now:
        raise LinkRefused(
            410,
            "This sign-in link has expired",
            "Sign-in links work for a short time after they are made. Go back to the "
            "application that sent you here and open the panel from there again.",
        )
    user = db.session.scalar(select(User).where(User.email == link.email))
    if user is not None and user.is_operator:
        raise LinkRefused(
            403,
            "This link cannot sign in an operator",
            "Operators log in with their password.",
        )
    if link.for_member and (user is None or membership_of(user, link.tenant) is None):
        raise LinkRefused(
            403,
            f"You are no longer a member of {link.tenant.name}",
            "You were removed from this tenant after the link was made. Ask its admins or "
            "the application that sent you here.",
        )
    return link


@dataclass(frozen=True)
class SignedIn:
    user: User  # holding the new session's token
    tenant: Tenant
    return_url: str | None


@retry_lost_race  # a parallel first use by the same email made the user first
def sign_in(
    slug: str, token: str, now: datetime, lifetimes: sessions.Lifetimes, ending: str | None
) -> SignedIn:
    """Uses the link once and starts its person's session, in one transaction: the user and the
    membership made on first use, the role set to the link's, the login of `ending` (whoever
    this browser was signed in as) ended, the sign-in audited in the tenant's log. LinkRefused
    (nothing written) when usable_link refuses, or when a parallel use was first."""
    with write_transaction(db.session):
        link = usable_link(slug, token, now)
        used = db.session.execute(
            update(SignInLink)
            .where(SignInLink.id == link.id, SignInLink.used_at.is_(None))
            .values(used_at=now)
            .execution_options(synchronize_session=False)
        )
        if int(used.rowcount or 0) != 1:  # type: ignore[attr-defined]
            raise already_used()
        tenant = link.tenant
        maker = Actor(user_id=None, label=f"sign-in link by {link.created_by_label}")
        user = db.session.scalar(select(User).where(User.email == link.email))
        created = user is None
        if user is None:
            user = User(email=link.email, password_hash=NO_PASSWORD)
            db.session.add(user)
            db.session.flush()
            record(maker, "user.created", user, None, after={"password": False})
        membership = membership_of(user, tenant)
        if membership is None:
            db.session.add(Membership(user_id=user.id, tenant_id=tenant.id, role=link.role))
            record(maker, "user.added", user, tenant.id, after={"role": link.role})
        elif membership.role != link.role:
            before = {"role": membership.role}
            membership.role = link.role
            record(maker, "user.role_changed", user, tenant.id, before, {"role": link.role})
        if ending is not None:
            sessions.end(ending)
        user.last_login_at = now
        record(
            Actor.for_user(user),
            "user.signed_in_by_link",
            user,
            tenant.id,
            after={"role": link.role, "link_by": link.created_by_label, "user_created": created},
        )
        user = sessions.start(user, now, lifetimes)
    return SignedIn(user=user, tenant=tenant, return_url=link.return_url)


def record(
    actor: Actor,
    action: str,
    user: User,
    tenant_id: int | None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    audit.record_event(
        db.session(),
        actor,
        action,
        ("user", user.id, user.email),
        tenant_id=tenant_id,
        before=before,
        after=after,
    )
