"""API tokens: the tenant's list, a new token (its secret shown once) and revoking one."""

from __future__ import annotations

from flask import Blueprint, request, url_for
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp.database import utcnow
from webapp.services import tokens
from webapp.token_models import TOKEN_SCOPES
from webapp.web import tenancy
from webapp.web.common import actor, htmx_redirect, page_or_partial

bp = Blueprint("tokens", __name__)
bp.before_request(login_required(lambda: None))

EXPIRY_CHOICES = (("", "Never"), ("30", "30 days"), ("90", "90 days"), ("365", "1 year"))


def page(status: int = 200, **context: object) -> Response:
    tenant = tenancy.require_admin()
    return page_or_partial(
        "tokens/index.html",
        "tokens/_list.html",
        status,
        tenant=tenant,
        tokens=tokens.tenant_tokens(tenant),
        token_zone=tenant.time_zone,
        revoke_endpoint="tokens.revoke",
        scopes=TOKEN_SCOPES,
        expiry_choices=EXPIRY_CHOICES,
        now=utcnow(),
        **{"errors": {}, "form": {}, "secret": None, **context},
    )


@bp.get("/tokens")
def index() -> Response:
    """The tenant's API tokens (admins only: a token writes as its creator could)."""
    return page()


@bp.post("/tokens")
def create() -> Response:
    """A new token; the page shows its secret this once."""
    tenant = tenancy.require_admin()
    form = {key: request.form.get(key, "") for key in ("name", "scope", "expires_in")}
    expiry = dict(EXPIRY_CHOICES)
    if form["expires_in"] not in expiry:
        return page(422, errors={"expires_in": "choose one of the offered expiries"}, form=form)
    days = int(form["expires_in"]) if form["expires_in"] else None
    try:
        token, secret = tokens.create_token(
            tenant, form["name"], form["scope"], days, actor(), utcnow()
        )
    except tokens.TokenError as error:
        return page(422, errors=error.errors, form=form)
    shown = page(201, secret=secret, created=token)
    shown.headers["Cache-Control"] = "no-store"  # no copy of the secret in any cache
    return shown


@bp.post("/tokens/<id:token_id>/revoke")
def revoke(token_id: int) -> Response:
    """Revoke a token: requests with it answer 401 from now on."""
    token = tenancy.get_rw_token_or_404(token_id)
    tokens.revoke_token(token, actor(), utcnow())
    return htmx_redirect(f"Token {token.prefix} “{token.name}” revoked.", url_for("tokens.index"))
