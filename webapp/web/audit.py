"""The audit log: who did what and when, with the changed fields before and after."""

from __future__ import annotations

from flask import Blueprint
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp import tenancy
from webapp.extensions import db
from webapp.models import AuditEvent
from webapp.web.common import page_or_partial
from webapp.web.params import id_arg

bp = Blueprint("audit", __name__)
bp.before_request(login_required(lambda: None))

PAGE_SIZE = 50


@bp.get("/audit")
def index() -> Response:
    """The tenant's audit events, newest first, keyset-paginated by id."""
    before = id_arg("before")
    query = tenancy.audit_events()
    if before is not None:
        query = query.where(AuditEvent.id < before)
    rows = list(db.session.scalars(query.order_by(AuditEvent.id.desc()).limit(PAGE_SIZE + 1)))
    next_before = rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None
    return page_or_partial(
        "audit/index.html",
        "audit/_rows.html" if before is not None else "audit/_log.html",
        events=rows[:PAGE_SIZE],
        next_before=next_before,
        tenant=tenancy.current_tenant(),
    )
