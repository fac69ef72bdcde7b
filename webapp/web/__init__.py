"""The tenant admin panel: one blueprint per area, pages and the htmx partials they include."""

from __future__ import annotations

from flask import Flask, render_template
from werkzeug.exceptions import HTTPException

from webapp import tenancy
from webapp.web import formatting, params


def register_panel(app: Flask) -> None:
    """Registers the panel's blueprints, template helpers and error pages."""
    from webapp.services.catalog import EXTENSION_KEY, install_catalog
    from webapp.web import audit, runs, schedules, tenants

    if EXTENSION_KEY not in app.extensions:
        install_catalog(app)
    params.install(app)  # the `<id:...>` converter, before the rules that use it
    for blueprint in (schedules.bp, runs.bp, audit.bp, tenants.bp):
        app.register_blueprint(blueprint)
    formatting.install(app)

    @app.errorhandler(tenancy.NoTenant)
    def no_tenant(_error: tenancy.NoTenant) -> tuple[str, int]:
        return render_template("errors/no_tenant.html"), 403

    @app.errorhandler(400)
    def bad_request(error: HTTPException) -> tuple[str, int]:
        text = error.description or "The request could not be understood."
        return render_template("errors/error.html", title="Bad request", text=text), 400

    for status, title, text in (
        (403, "Not allowed", "Your role in this tenant can look but not change things."),
        (404, "Not found", "There is nothing here, or it belongs to another tenant."),
        (413, "Too large", "The request is larger than the panel accepts."),
    ):

        def error_page(_error: Exception, status: int = status, title: str = title,
                       text: str = text) -> tuple[str, int]:
            return render_template("errors/error.html", title=title, text=text), status

        app.register_error_handler(status, error_page)
