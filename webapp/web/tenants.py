"""The tenant switcher in the header."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, request, url_for
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp import tenancy
from webapp.web.params import bad_request, id_value

bp = Blueprint("tenants", __name__)
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
