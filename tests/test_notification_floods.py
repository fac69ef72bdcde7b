"""Notification floods (issue 33 items 3 and 4): a fair outbox that serves tenants in turns, the
per-tenant limits on messages per hour and on recipients per schedule, suppression of every kind
of event within its window, and the digest of what a limit held back; delivered to a real local
SMTP server."""

from __future__ import annotations

from datetime import timedelta

from flask import Flask

from tests import smtp_support
from tests.conftest import WorkerFactory, World
from tests.settings_support import reconfigure
from tests.smtp_support import SmtpServer
from tests.test_notifications import finish, watched
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Notification
from webapp.scheduler.outbox import BATCH, send_notifications

smtp_server = smtp_support.smtp_server


def queue_flood(tenant_id: int, count: int) -> None:
    """`count` due emails of one tenant, queued a minute ago (before anything else)."""
    queued = utcnow() - timedelta(minutes=1)
    db.session.add_all(
        Notification(
            tenant_id=tenant_id,
            event="failure",
            channel="email",
            target=f"flood{number}@example.com",
            subject=f"flood {number}",
            body="flood\n",
            idempotency_key=f"flood.{number}",
            status="pending",
            available_at=queued,
            created_at=queued,
        )
        for number in range(count)
    )
    db.session.commit()


def test_a_flooding_tenant_does_not_delay_another_tenants_message(
    app: Flask, world: World, smtp_server: SmtpServer, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **smtp_server.settings())
    queue_flood(world.alpha.id, 200)
    schedule = watched(world, notify_emails=["oncall@beta.example.com"])
    schedule.tenant_id = world.beta.id
    db.session.commit()
    finish(schedule, make_worker().id, fails=True)

    # The first batch: beta's failure goes out among the first rows, not after alpha's 200.
    assert send_notifications(db.session(), None, make_worker().id, utcnow()) == BATCH
    recipients = [message.recipients for message in smtp_server.messages]
    assert ["oncall@beta.example.com"] in recipients
    assert len(recipients) == BATCH
    # Alpha's flood is still sent, oldest first.
    assert ["flood0@example.com"] in recipients
