"""`/metrics`: the Prometheus figures, for the holder of SCHEDULER_METRICS_TOKEN only."""

from __future__ import annotations

import hmac

from flask import Blueprint, abort, after_this_request, request, session
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.wrappers import Response

from webapp.config import settings
from webapp.extensions import db
from webapp.services.metrics import exposition

bp = Blueprint("metrics", __name__)
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def holds_the_token() -> bool:
    """`Authorization: Bearer TOKEN` with the configured token, compared in constant time."""
    expected = settings().SCHEDULER_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), expected.encode())


def keep_no_session(response: Response) -> Response:
    session.modified = False
    return response


@bp.get("/metrics")
def scrape() -> Response:
    """The figures in Prometheus' text format; anyone else gets the unknown URL's 404."""
    if not holds_the_token():
        # The same page as any unknown URL: whether metrics are on is not told either. That page
        # makes a CSRF token; a scraper gets no session cookie for it.
        after_this_request(keep_no_session)
        abort(404)
    try:
        body = exposition(db.session(), settings())
    except SQLAlchemyError:
        # Prometheus records the failed scrape (up == 0); the reason is in /healthz.
        db.session.rollback()
        return Response("database unavailable\n", 503, content_type="text/plain")
    db.session.rollback()  # read only: end the transaction now, not at teardown
    return Response(body, content_type=PROMETHEUS_TEXT, headers={"Cache-Control": "no-store"})
