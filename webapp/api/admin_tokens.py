"""The operator API's tokens of a tenant: made on its behalf (the secret in the answer, once),
listed and revoked, with the panel's and the command line's service (services.tokens), audited
in the tenant's log with the operator token as the actor."""

from __future__ import annotations

from flask import Response, request
from sqlalchemy import select

from webapp.api import auth
from webapp.api.admin_schemas import TokenCreatedOut, TokenIn, TokenOut, TokenPage
from webapp.api.admin_tenants import parsed, tenant_or_404
from webapp.api.preconditions import idempotent
from webapp.api.problems import Problem
from webapp.api.views import answer, bp
from webapp.database import utcnow
from webapp.extensions import db
from webapp.services import tokens
from webapp.token_models import ApiToken

NO_KEY = (
    "this endpoint takes no Idempotency-Key: its answer holds the token's secret, which is "
    "never stored, so it cannot be replayed; a retry makes another token (revoke the one "
    "you did not get)"
)


@bp.errorhandler(tokens.TokenError)
def invalid_token(error: tokens.TokenError) -> Response:
    return Problem.invalid(error.errors).response()


@bp.get("/v1/admin/tenants/<slug>/tokens")
def list_tokens(slug: str) -> Response:
    """The tenant's API tokens, newest first, revoked and expired ones included."""
    tenant = tenant_or_404(slug)
    now = utcnow()
    return answer(TokenPage(items=[TokenOut.of(t, now) for t in tokens.tenant_tokens(tenant)]))


@bp.post("/v1/admin/tenants/<slug>/tokens")
def create_token(slug: str) -> Response:
    """A new token of the tenant; the answer holds its secret, this once."""
    if "Idempotency-Key" in request.headers:
        raise Problem.invalid({"Idempotency-Key": NO_KEY}, status=400)
    tenant = tenant_or_404(slug)
    data = parsed(TokenIn)
    token, secret = tokens.create_token(
        tenant, data["name"], data["scope"], data.get("expires_in"), auth.actor(), utcnow()
    )
    created = TokenOut.of(token, utcnow()).model_dump()
    response = answer(TokenCreatedOut(**created, secret=secret), 201)
    response.headers["Cache-Control"] = "no-store"  # no copy of the secret in any cache
    return response


@bp.post("/v1/admin/tenants/<slug>/tokens/<id:token_id>/revoke")
@idempotent
def revoke_token(slug: str, token_id: int) -> Response:
    """Revokes the token: requests with it answer 401 from now on (no change if it was)."""
    tenant = tenant_or_404(slug)
    token = db.session.scalar(
        select(ApiToken).where(ApiToken.tenant_id == tenant.id, ApiToken.id == token_id)
    )
    if token is None:
        raise Problem(404, "not-found", f"tenant {slug!r} has no token {token_id}")
    tokens.revoke_token(token, auth.actor(), utcnow())
    return answer(TokenOut.of(token, utcnow()))
