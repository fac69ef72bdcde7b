"""The header's controls: the tenant switcher and the "Times: Local | UTC" toggle."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, request, session, url_for
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp.web import tenancy
from webapp.web.auth import is_own_path
from webapp.web.formatting import TIMES_KEY
from webapp.web.params import bad_request, id_value

bp = Blueprint("tenants", __name__)
TIMES = ("local", "utc")
bp.before_request(login_required(lambda: None))


@bp.post("/tenant")
def switch() -> Response:
    """Make another of the user's tenants the current one."""
    tenant_id = id_value("tenant", request.form.get("tenant", ""))
    if tenant_id is None:
        bad_request("Choose a tenant to switch to.")
    tenant = tenancy.switch_tenant(tenant_id)
    flash(f"Now working in {tenant.name}.", "info")
    return redirect(url_for("schedules.index"), 303)


@bp.post("/times")
def times() -> Response:
    """Show every time in the tenant's zone ("local") or in UTC, then return to the page."""
    choice = request.form.get("times", "")
    if choice not in TIMES:
        bad_request("Choose whether to show times in local time (“local”) or in UTC (“utc”).")
    session[TIMES_KEY] = choice
    target = request.form.get("next", "")
    return redirect(target if is_own_path(target) else url_for("schedules.index"), 303)
