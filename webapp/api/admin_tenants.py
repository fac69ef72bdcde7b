"""The operator API's tenants under /api/v1/admin/tenants: create, list, get, change (name,
zone, limits) and delete, on the API's blueprint with its conventions (problem details, ETag
and If-Match, Idempotency-Key on POSTs). Only operator tokens get here (auth.authenticate);
every change is audited with the token as the actor, in the tenant's log."""

from __future__ import annotations

from typing import Any

from flask import Response, url_for
from pydantic import BaseModel, ValidationError
from sqlalchemy import Select, select

from webapp.api import auth
from webapp.api.admin_schemas import (
    DeleteQuery,
    TenantDeletedOut,
    TenantOut,
    TenantPage,
    TenantPatch,
    tenant_version,
)
from webapp.api.preconditions import idempotent, if_match, not_modified, quoted
from webapp.api.problems import Problem
from webapp.api.schemas import PageQuery
from webapp.api.views import answer, body, bp, cursor_id, query
from webapp.extensions import db
from webapp.models import Tenant
from webapp.services import accounts, tenants
from webapp.services.account_schema import AccountError
from webapp.services.schema import field_errors


@bp.errorhandler(AccountError)
def invalid_account(error: AccountError) -> Response:
    """The account services' refusals, by field, with the command line's messages; a tenant
    that is not empty is a conflict."""
    if isinstance(error, tenants.TenantNotEmpty):
        return Problem(409, "tenant-not-empty", str(error)).response()
    if isinstance(error, accounts.Conflict):
        return Problem(409, "conflict", str(error), error.errors).response()
    return Problem.invalid({k or "body": v for k, v in error.errors.items()}).response()


def tenant_or_404(slug: str) -> Tenant:
    tenant = db.session.scalar(accounts.tenant_by_slug(slug))
    if tenant is None:
        raise Problem(404, "not-found", f"no tenant with slug {slug!r}")
    return tenant


def parsed(model: type[BaseModel]) -> dict[str, Any]:
    """The body's fields as given (none of the model's defaults), checked by `model`: unknown
    fields and wrong types are refused by field; the services check the values."""
    data = body()
    try:
        model.model_validate(data)
    except ValidationError as error:
        raise Problem.invalid(field_errors(error, model)) from None
    return data


def id_page(model: Any, rows: Select[Any], asked: PageQuery) -> tuple[list[Any], str | None]:
    """A page of `rows` (of `model`) by id, and the cursor of the next one (None: the last)."""
    after = cursor_id(asked.cursor)
    if after is not None:
        rows = rows.where(model.id > after)
    found = list(db.session.scalars(rows.order_by(model.id).limit(asked.limit + 1)))
    page = found[: asked.limit]
    return page, str(page[-1].id) if len(found) > asked.limit else None


def tenant_etag(tenant: Tenant) -> str:
    return quoted(tenant_version(tenant))


def tenant_answer(tenant: Tenant, status: int = 200) -> Response:
    location = url_for("api.get_tenant", slug=tenant.slug) if status == 201 else None
    response = answer(TenantOut.of(tenant), status, location)
    response.headers["ETag"] = tenant_etag(tenant)
    return response


@bp.get("/v1/admin/tenants")
def list_tenants() -> Response:
    """Every tenant by id, a page at a time."""
    page, next_cursor = id_page(Tenant, select(Tenant), query(PageQuery))
    return answer(TenantPage(items=[TenantOut.of(t) for t in page], next_cursor=next_cursor))


@bp.post("/v1/admin/tenants")
@idempotent
def create_tenant() -> Response:
    """A new tenant (slug, name, time_zone), checked as `flask tenant create` checks it; 201."""
    data = body()
    tenant = accounts.new_tenant(data, auth.actor())
    return tenant_answer(tenant, 201)


@bp.get("/v1/admin/tenants/<slug>")
def get_tenant(slug: str) -> Response:
    """One tenant; 304 without a body when If-None-Match names its current ETag."""
    tenant = tenant_or_404(slug)
    tag = tenant_etag(tenant)
    if not_modified(tag):
        return Response(status=304, headers={"ETag": tag})
    return tenant_answer(tenant)


@bp.patch("/v1/admin/tenants/<slug>")
def update_tenant(slug: str) -> Response:
    """Changes the given fields: name, zone, limits (null: the installation's default)."""
    tenant = tenant_or_404(slug)
    given = parsed(TenantPatch)
    precondition = if_match(tenant_etag, "tenant")
    tenants.update_tenant(tenant, given, auth.actor(), precondition)
    return tenant_answer(tenant)


@bp.delete("/v1/admin/tenants/<slug>")
def delete_tenant(slug: str) -> Response:
    """Deletes an empty tenant, or with cascade=true everything it holds; says what went."""
    tenant = tenant_or_404(slug)
    asked = query(DeleteQuery)
    precondition = if_match(tenant_etag, "tenant")
    removed = tenants.delete_tenant(tenant, asked.cascade, auth.actor(), precondition)
    return answer(TenantDeletedOut(slug=slug, removed=removed))
