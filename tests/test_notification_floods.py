"""Notification floods (issue 33 items 3 and 4): a fair outbox that serves tenants in turns, the
per-tenant limits on messages per hour and on recipients per schedule, suppression of every kind
of event within its window, and the digest of what a limit held back; delivered to a real local
SMTP server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from sqlalchemy import select

from tests import smtp_support, test_catalog_webhook
from tests.api_helpers import NEW, Api, problem_fields
from tests.conftest import WorkerFactory, World, make_run
from tests.panel_helpers import Panel
from tests.settings_support import reconfigure
from tests.smtp_support import SmtpServer
from tests.test_catalog_webhook import LoopbackServer
from tests.test_notifications import FORM, LOOPBACK, field_error, finish, outbox, watched
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Notification, Schedule, Tenant
from webapp.scheduler.notify import NotifyEvent, record_events
from webapp.scheduler.outbox import BATCH, send_notifications
from webapp.services.audit import Actor
from webapp.services.transfer import ImportProblems, import_schedules

smtp_server = smtp_support.smtp_server
server = test_catalog_webhook.server


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


def send_all(worker_id: int, now: datetime) -> None:
    while send_notifications(db.session(), None, worker_id, now):
        pass


def test_a_pause_resume_loop_sends_one_paused_notification_per_window(
    app: Flask, world: World, smtp_server: SmtpServer, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **smtp_server.settings())
    schedule = watched(world, pause_after_failures=1)
    worker = make_worker().id
    for _ in range(5):  # fails, pauses itself, is resumed, fails again...
        finish(schedule, worker, fails=True)
        db.session.get(Schedule, schedule.id).active = True  # type: ignore[union-attr]
        db.session.commit()

    assert [(row.event, row.status) for row in outbox()][:4] == [
        ("failure", "pending"),
        ("paused", "pending"),  # a pause right after a failure is heard of
        ("failure", "suppressed"),
        ("paused", "suppressed"),
    ]
    send_all(worker, utcnow())
    subjects = [message.message["Subject"] for message in smtp_server.messages]
    assert len(subjects) == 2 and "was paused" in subjects[1]


def test_a_flood_sends_at_most_the_hourly_limit_and_then_one_digest(
    app: Flask, world: World, smtp_server: SmtpServer, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **smtp_server.settings(), SCHEDULER_NOTIFY_MAX_PER_HOUR=10)
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None
    tenant.notify_emails = ["admin@alpha.example.com"]
    now = datetime(2026, 3, 7, 10, 30, tzinfo=UTC)
    events = []
    for number in range(20):  # 20 schedules of 2 recipients, each paused 3 times
        schedule = watched(
            world, f"s{number}", notify_emails=[f"a{number}@example.com", f"b{number}@x.com"]
        )
        for _ in range(3):
            run = make_run(schedule, scheduled_for=now, trigger="manual")
            events.append(NotifyEvent("paused", schedule.id, run.id))
    record_events(db.session(), None, events, now)
    db.session.commit()
    worker = make_worker().id

    send_all(worker, now)
    assert len(smtp_server.messages) == 10  # the limit: the first 5 schedules' pauses
    send_all(worker, now + timedelta(minutes=29))
    assert len(smtp_server.messages) == 10  # the digest waits for the hour's end

    send_all(worker, now + timedelta(minutes=30))
    digest = smtp_server.messages[10:]
    assert [message.recipients for message in digest] == [["admin@alpha.example.com"]]
    # 15 schedules' 3 pauses to 2 recipients each were held back by the limit.
    assert digest[0].message["Subject"] == "[alpha] 90 more notifications suppressed"
    assert "between 2026-03-07 10:00 and 11:00 UTC" in digest[0].message.get_content()


def test_the_digest_counts_what_the_limit_held_back_until_it_is_sent(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    reconfigure(app, SCHEDULER_NOTIFY_MAX_PER_HOUR=1)
    now = datetime(2026, 3, 7, 10, 30, tzinfo=UTC)
    schedules = [watched(world, f"s{number}") for number in range(3)]
    for minutes, schedule in enumerate(schedules):
        run = make_run(schedule, scheduled_for=now, trigger="manual")
        at = now + timedelta(minutes=minutes)
        record_events(db.session(), None, [NotifyEvent("failure", schedule.id, run.id)], at)
        db.session.commit()

    [digest] = [row for row in outbox() if row.event == "digest"]
    assert digest.subject == "[alpha] 2 more notifications suppressed"
    assert (digest.target, digest.available_at) == ("ops@example.com", now + timedelta(minutes=30))


def test_the_digest_goes_to_the_tenants_webhook_signed(
    app: Flask, world: World, server: LoopbackServer, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **LOOPBACK, SCHEDULER_NOTIFY_MAX_PER_HOUR=1)
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None
    tenant.notify_webhook_url = server.url("/alerts")
    now = datetime(2026, 3, 7, 10, 30, tzinfo=UTC)
    events = []
    for number in range(4):  # each to the tenant's webhook: the first fits, 3 are held back
        schedule = watched(world, f"s{number}", notify_emails=[])
        run = make_run(schedule, scheduled_for=now, trigger="manual")
        events.append(NotifyEvent("failure", schedule.id, run.id))
    record_events(db.session(), None, events, now)
    db.session.commit()

    send_all(make_worker().id, now + timedelta(hours=1))

    documents = sorted((json.loads(request.body) for request in server.received), key=str)
    assert [document["event"] for document in documents] == ["digest", "failure"]
    assert (documents[0]["tenant"], documents[0]["suppressed"]) == ("alpha", 3)
    assert all(request.headers["X-Scheduler-Signature"] for request in server.received)


def test_too_many_recipients_are_refused_where_they_are_set(app: Flask, world: World) -> None:
    reconfigure(app, SCHEDULER_NOTIFY_MAX_RECIPIENTS=2)
    three = ["a@example.com", "b@example.com", "c@example.com"]

    response = Panel(app, world.alice).post(
        "/schedules/new", {**FORM, "notify_emails": ", ".join(three)}
    )
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert field_error(page, "notify_emails") == "at most 2 addresses, not 3"

    response = Panel(app, world.alice).post(
        "/settings/notifications", {"notify_emails": ", ".join(three), "notify_webhook_url": ""}
    )
    assert response.status_code == 422
    assert field_error(response.get_data(as_text=True), "notify_emails") == (
        "at most 2 addresses, not 3"
    )

    answer = Api(app, world.alpha, world.alice).post(
        "/api/v1/schedules", json={**NEW, "notify_emails": three}
    )
    assert answer.status_code == 422
    assert problem_fields(answer)["notify_emails"] == "at most 2 addresses, not 3"

    item = {**FORM, "key": "nightly", "args": {"message": "hi"}, "notify_emails": three}
    item.pop("args.message"), item.pop("active")
    with pytest.raises(ImportProblems) as refused:
        import_schedules(world.alpha, json.dumps([item]), Actor.cli(), utcnow())
    assert "notify_emails: at most 2 addresses, not 3" in str(refused.value)
    assert db.session.scalars(select(Schedule)).all() == []
