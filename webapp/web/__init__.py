"""The tenant admin panel: one blueprint per area, pages and the htmx partials they include."""

from __future__ import annotations

from flask import Flask, make_response, redirect, render_template, request, url_for
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from webapp.database import RETRY_AFTER
from webapp.web import formatting, params, tenancy
from webapp.web.formatting import is_htmx


def register_panel(app: Flask) -> None:
    """Registers the panel's blueprints, template helpers and error pages."""
    from webapp.catalog.current import EXTENSION_KEY, install_catalog
    from webapp.web import (
        audit,
        calendars,
        notifications,
        operator,
        operator_charts,
        runs,
        schedules,
        sign_in,
        tenants,
        tokens,
        two_factor,
        upcoming,
    )

    if EXTENSION_KEY not in app.extensions:
        install_catalog(app)
    params.install(app)  # the `<id:...>` converter, before the rules that use it
    for blueprint in (
        schedules.bp,
        upcoming.bp,
        runs.bp,
        audit.bp,
        tenants.bp,
        tokens.bp,
        operator.bp,
        operator_charts.bp,
        notifications.bp,
        calendars.bp,
        two_factor.bp,
        sign_in.bp,
    ):
        app.register_blueprint(blueprint)
    formatting.install(app)

    @app.errorhandler(tenancy.NoTenant)
    def no_tenant(_error: tenancy.NoTenant) -> Response | tuple[str, int]:
        if tenancy.is_operator():  # an operator needs no tenant: the operator area is theirs
            return redirect(url_for("operator.tenants"), 303)
        return render_template("errors/no_tenant.html"), 403

    @app.errorhandler(OperationalError)
    def database_unavailable(_error: OperationalError) -> Response:
        """The database is down, or busy past its timeouts: 503 and when to try again (the
        request's transaction was rolled back whole)."""
        page = render_template("errors/unavailable.html", retry_after=RETRY_AFTER)
        return make_response(page, 503, {"Retry-After": str(RETRY_AFTER)})

    @app.errorhandler(400)
    def bad_request(error: HTTPException) -> Response:
        text = error.description or "The request could not be understood."
        return error_response(400, "Bad request", text)

    @app.errorhandler(409)
    def conflict(error: HTTPException) -> Response:
        return error_response(409, "Not possible", error.description or "Not possible now.")

    for status, title, text in (
        (403, "Not allowed", "Your role in this tenant can look but not change things."),
        (404, "Not found", "There is nothing here, or it belongs to another tenant."),
        (413, "Too large", "The request is larger than the panel accepts."),
    ):

        def error_page(
            _error: Exception, status: int = status, title: str = title, text: str = text
        ) -> Response:
            return error_response(status, title, text)

        app.register_error_handler(status, error_page)


def error_response(status: int, title: str, text: str) -> Response:
    """The error page; for a write sent by htmx, only the message, among the page's messages.

    htmx 4 swaps a 4xx answer into the form's target (a row, the schedule's page), so a failed
    action (a schedule deleted meanwhile, a job gone from the catalog) would paste a whole page
    there: it says why and leaves the page as it is instead."""
    if is_htmx() and request.method != "GET":
        html = render_template("_flash_oob.html", message=text, category="error")
        response = make_response(html, status)
        response.headers["HX-Reswap"] = "none"
        return response
    return make_response(render_template("errors/error.html", title=title, text=text), status)
