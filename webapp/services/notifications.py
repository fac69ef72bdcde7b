"""A tenant's notification settings (default recipients, the webhook secret) and the history of
what was sent. Each change is one transaction with its audit event; the secret itself is never
written to the audit log."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from sqlalchemy import BindParameter, Select, select

from webapp.config import settings as app_settings
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import Notification, Tenant
from webapp.services import audit as audit_events
from webapp.services.audit import Actor
from webapp.services.schema import check_notify_emails, check_notify_webhook_url

HISTORY = 20  # notifications shown on a schedule's page


class NotificationSettingsError(ValueError):
    """Bad input: field name -> message, shown next to the field."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{name}: {message}" for name, message in self.errors.items()))


def new_secret() -> str:
    return secrets.token_hex(32)


def audit(
    tenant: Tenant,
    actor: Actor,
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    audit_events.record_event(
        db.session(),
        actor,
        action,
        ("tenant", tenant.id, tenant.name),
        tenant_id=tenant.id,
        before=before,
        after=after,
    )


def settings_of(tenant: Tenant) -> dict[str, Any]:
    """What the audit log records of the settings (not the secret)."""
    return {
        "notify_emails": list(tenant.notify_emails or ()),
        "notify_webhook_url": tenant.notify_webhook_url,
    }


def update_defaults(
    tenant: Tenant,
    emails: list[str],
    webhook_url: str | None,
    actor: Actor,
    settings: Mapping[str, object],
) -> None:
    """Sets the tenant's default recipients (checked as a schedule's own are); makes the webhook
    secret on the first save."""
    errors: dict[str, str] = {}
    try:
        emails = check_notify_emails(emails, app_settings().SCHEDULER_NOTIFY_MAX_RECIPIENTS)
    except ValueError as error:
        errors["notify_emails"] = str(error)
    try:
        webhook_url = check_notify_webhook_url(webhook_url, settings)
    except ValueError as error:
        errors["notify_webhook_url"] = str(error)
    if errors:
        raise NotificationSettingsError(errors)
    with write_transaction(db.session):
        before = settings_of(tenant)
        tenant.notify_emails = emails
        tenant.notify_webhook_url = webhook_url
        after = settings_of(tenant)
        if tenant.webhook_secret is None:
            tenant.webhook_secret = new_secret()
            after["webhook_secret"] = "created"
        changed = [name for name in after if before.get(name) != after[name]]
        if changed:
            audit(
                tenant,
                actor,
                "tenant.notifications_updated",
                {name: before.get(name) for name in changed},
                {name: after[name] for name in changed},
            )


def rotate_secret(tenant: Tenant, actor: Actor) -> None:
    """A new webhook secret: signatures made with the old one stop verifying at once."""
    with write_transaction(db.session):
        tenant.webhook_secret = new_secret()
        audit(tenant, actor, "tenant.webhook_secret_rotated", None, {"webhook_secret": "rotated"})


def recent_notifications(
    tenant_id: int | BindParameter[int], schedule_id: int | BindParameter[int]
) -> Select[Notification]:
    """The schedule's latest notifications, newest first (a query: the schedule's page reads
    them in the statement that loads the schedule)."""
    return (
        select(Notification)
        .where(Notification.tenant_id == tenant_id, Notification.schedule_id == schedule_id)
        .order_by(Notification.id.desc())
        .limit(HISTORY)
    )
