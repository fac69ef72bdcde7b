"""The tenant switcher in the header."""

from __future__ import annotations

from flask import Blueprint, abort, flash, redirect, request, url_for
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp import tenancy

bp = Blueprint("tenants", __name__)
bp.before_request(login_required(lambda: None))


@bp.post("/tenant")
def switch() -> Response:
    """Make another of the user's tenants the current one."""
    tenant_id = request.form.get("tenant", "")
    if not tenant_id.isdigit():
        abort(404)
    tenant = tenancy.switch_tenant(int(tenant_id))
    flash(f"Now working in {tenant.name}.", "info")
    return redirect(url_for("schedules.index"), 303)
