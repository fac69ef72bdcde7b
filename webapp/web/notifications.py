"""Notification settings: the tenant's default recipients and webhook secret, and the history
of notifications on a schedule's page."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request, url_for
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp.config import settings
from webapp.models import MAX_NOTIFY_EMAILS, MAX_URL
from webapp.services import notifications, two_factor
from webapp.web import tenancy
from webapp.web.common import actor, htmx_redirect, page_or_partial
from webapp.web.forms import split_emails

bp = Blueprint("notifications", __name__)
bp.before_request(login_required(lambda: None))


@bp.app_context_processor
def limits() -> dict[str, Any]:
    """The widths of the notification fields, for the forms' maxlength."""
    return {"MAX_URL": MAX_URL, "MAX_NOTIFY_EMAILS": MAX_NOTIFY_EMAILS}


def page(status: int = 200, **context: Any) -> Response:
    tenant = tenancy.current_tenant()
    form = {
        "notify_emails": ", ".join(tenant.notify_emails or ()),
        "notify_webhook_url": tenant.notify_webhook_url or "",
    }
    return page_or_partial(
        "settings/notifications.html",
        "settings/notifications.html",
        status,
        tenant=tenant,
        max_running=tenant.max_running
        if tenant.max_running is not None
        else settings().SCHEDULER_MAX_RUNNING,
        window_minutes=round(settings().SCHEDULER_NOTIFY_WINDOW / 60),
        **{"errors": {}, "form": form, **context},
    )


@bp.get("/settings/notifications")
def index() -> Response:
    """The tenant's default recipients; admins also see the webhook secret."""
    return page()


@bp.post("/settings/notifications")
def save() -> Response:
    """Save the default recipients (checked as a schedule's own are)."""
    tenant = tenancy.require_admin()
    form = {name: request.form.get(name, "") for name in ("notify_emails", "notify_webhook_url")}
    try:
        notifications.update_defaults(
            tenant,
            split_emails(form["notify_emails"]),
            form["notify_webhook_url"],
            actor(),
            settings().job_settings(),
        )
    except notifications.NotificationSettingsError as error:
        return page(422, errors=error.errors, form=form)
    return htmx_redirect("Notification settings saved.", url_for("notifications.index"))


@bp.post("/settings/notifications/rotate")
def rotate() -> Response:
    """Replace the webhook secret: receivers must verify with the new one from now on."""
    tenant = tenancy.require_admin()
    notifications.rotate_secret(tenant, actor())
    return htmx_redirect("Webhook secret rotated.", url_for("notifications.index"))


@bp.post("/settings/two-factor")
def require_two_factor() -> Response:
    """Require two-factor login of the tenant's admins, or stop requiring it (admins only)."""
    tenant = tenancy.require_admin()
    required = request.form.get("require_two_factor_admins") == "on"
    two_factor.require_for_admins(tenant, required, actor())
    message = (
        "Admins of this tenant now need two-factor login."
        if required
        else "Admins of this tenant no longer need two-factor login."
    )
    return htmx_redirect(message, url_for("notifications.index"))
