"""The operator API's users and memberships: a tenant's members (add, list, set the role,
remove), the users (list, get) and their sessions (revoke), with the command line's services
and messages (accounts.add_user, remove_member, revoke_sessions), audited with the operator
token as the actor: a membership's change in the tenant's log, a user's in the installation's."""

from __future__ import annotations

import hashlib

from flask import Response, url_for
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from webapp.api import auth
from webapp.api.admin_schemas import (
    MemberOut,
    MemberPage,
    RolePatch,
    SessionsRevokedOut,
    UserOut,
    UserPage,
    UserQuery,
)
from webapp.api.admin_tenants import id_page, parsed, tenant_or_404
from webapp.api.preconditions import idempotent, if_match, quoted
from webapp.api.problems import Problem
from webapp.api.views import answer, bp, query
from webapp.extensions import db
from webapp.models import Membership, Tenant, User
from webapp.services import accounts
from webapp.services.account_schema import UserIn


def member_etag(member: MemberOut) -> str:
    digest = hashlib.sha256(f"{member.user_id} {member.email} {member.role}".encode())
    return quoted(digest.hexdigest()[:32])


def member_answer(member: MemberOut, status: int = 200, location: str | None = None) -> Response:
    """A membership with its ETag (for If-Match on PATCH and DELETE)."""
    response = answer(member, status, location)
    response.headers["ETag"] = member_etag(member)
    return response


def unchanged(member: MemberOut) -> MemberOut:
    """The member, or 412 when If-Match names another version of the membership."""
    precondition = if_match(member_etag, "membership")
    if precondition is not None:
        precondition(member)
    return member


def user_or_404(user_id: int) -> User:
    user = db.session.get(User, user_id)
    if user is None:
        raise Problem(404, "not-found", f"no user {user_id}")
    return user


def member_or_404(tenant: Tenant, user_id: int) -> MemberOut:
    found = db.session.execute(
        select(User.email, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.tenant_id == tenant.id, User.id == user_id)
    ).one_or_none()
    if found is None:
        raise Problem(404, "not-found", f"user {user_id} is not a member of {tenant.slug!r}")
    email, role = found
    return MemberOut.of(user_id, email, role)


@bp.get("/v1/admin/tenants/<slug>/members")
def list_members(slug: str) -> Response:
    """The tenant's users and their roles, by email."""
    tenant = tenant_or_404(slug)
    members = accounts.list_members(tenant.slug)
    return answer(MemberPage(items=[MemberOut.of(u.id, u.email, role) for u, role in members]))


@bp.post("/v1/admin/tenants/<slug>/members")
@idempotent
def add_member(slug: str) -> Response:
    """Adds a user to the tenant with a role, creating the user if new (a password is then
    needed), as `flask user create` does; 201 when the membership is new, 200 when it was
    there (its role set as given)."""
    tenant = tenant_or_404(slug)
    data = parsed(UserIn)
    added = accounts.add_user(
        data["email"], tenant.slug, data["role"], data.get("password"), actor=auth.actor()
    )
    member = member_or_404(tenant, added.user.id)
    if not added.joined:
        return member_answer(member)
    location = url_for("api.get_member", slug=tenant.slug, user_id=added.user.id)
    return member_answer(member, 201, location)


@bp.get("/v1/admin/tenants/<slug>/members/<id:user_id>")
def get_member(slug: str, user_id: int) -> Response:
    """One member of the tenant and their role."""
    return member_answer(member_or_404(tenant_or_404(slug), user_id))


@bp.patch("/v1/admin/tenants/<slug>/members/<id:user_id>")
def set_role(slug: str, user_id: int) -> Response:
    """Sets a member's role (admin or viewer)."""
    tenant = tenant_or_404(slug)
    member = member_or_404(tenant, user_id)
    role = parsed(RolePatch)["role"]
    unchanged(member)
    accounts.add_user(member.email, tenant.slug, role, None, actor=auth.actor())
    return member_answer(member_or_404(tenant, user_id))


@bp.delete("/v1/admin/tenants/<slug>/members/<id:user_id>")
def remove_member(slug: str, user_id: int) -> Response:
    """Takes the user out of the tenant and ends all their sessions; the user stays."""
    member = unchanged(member_or_404(tenant_or_404(slug), user_id))
    accounts.remove_member(member.email, slug, actor=auth.actor())
    return Response(status=204)


@bp.get("/v1/admin/users")
def list_users() -> Response:
    """Every user by id with their memberships, a page at a time; `email` finds one."""
    asked = query(UserQuery)
    loads = selectinload(User.memberships).selectinload(Membership.tenant)
    rows = select(User).options(loads)
    if asked.email is not None:
        rows = rows.where(User.email == asked.email.strip().lower())
    page, next_cursor = id_page(User, rows, asked)
    return answer(UserPage(items=[UserOut.of(user) for user in page], next_cursor=next_cursor))


@bp.get("/v1/admin/users/<id:user_id>")
def get_user(user_id: int) -> Response:
    """One user and the tenants they belong to."""
    return answer(UserOut.of(user_or_404(user_id)))


@bp.post("/v1/admin/users/<id:user_id>/revoke-sessions")
@idempotent
def revoke_sessions(user_id: int) -> Response:
    """Ends every session of the user at once (a lost laptop, a departing employee)."""
    user = user_or_404(user_id)
    ended = accounts.revoke_sessions(user.email, actor=auth.actor())
    return answer(SessionsRevokedOut(user_id=user.id, sessions_ended=ended))
