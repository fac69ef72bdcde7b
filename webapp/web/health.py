"""`/healthz`: is this web process able to serve (the database answers, the schema is current)?

No login and no figures: a load balancer or Kubernetes asks it, and anyone may."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from werkzeug.wrappers import Response

from webapp import release
from webapp.extensions import db
from webapp.services.health import Check, database_check, head_revision, migrations_check

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    """200 with {"status": "ok", "version": ..., ...} when every check passes, 503 with "fail"
    otherwise."""
    session = db.session()
    directory = current_app.extensions["migrate"].directory
    database = database_check(session)
    if database.ok:
        migrations = migrations_check(session, directory)
    else:
        migrations = Check(
            False, "not checked", {"current": None, "head": head_revision(directory)}
        )
    session.rollback()  # read only: end the transaction now
    checks = {"database": database, "migrations": migrations}
    healthy = all(check.ok for check in checks.values())
    response = jsonify(
        status="ok" if healthy else "fail",
        version=release.version(),
        checks={name: check.as_json() for name, check in checks.items()},
    )
    response.status_code = 200 if healthy else 503
    response.headers["Cache-Control"] = "no-store"
    return response
