"""Failure notifications: the outbox written in the run's outcome transaction, failures in a row
and the auto-pause, the flapping window, recipients, and the sender delivering to a real local
SMTP server and a real local HTTP server, with retries and leases."""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import select

from tests import smtp_support, test_catalog_webhook
from tests.conftest import WorkerFactory, World, make_run, make_schedule
from tests.panel_helpers import Panel
from tests.scheduler_helpers import execute_leased
from tests.settings_support import reconfigure
from tests.smtp_support import SmtpServer, free_port
from tests.test_catalog_webhook import LoopbackServer
from tests.worker_support import Workers, wait_for
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import AuditEvent, Notification, Run, Schedule, Tenant
from webapp.scheduler.leases import lease_once, reap_once, start_runs
from webapp.scheduler.notify import record_overdue
from webapp.scheduler.outbox import (
    BACKOFF,
    MAX_ATTEMPTS,
    NO_SMTP_HOST,
    lease_notifications,
    send_notifications,
)
from webapp.scheduler.worker import NOTIFICATIONS_THREAD
from webapp.services.audit import Actor
from webapp.services.transfer import ImportProblems, export_schedules, import_schedules

# The fixtures of a real SMTP server and a real HTTP server, both on 127.0.0.1.
smtp_server = smtp_support.smtp_server
server = test_catalog_webhook.server
TTL = timedelta(seconds=60)
LOOPBACK = {
    "SCHEDULER_WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"],
    "SCHEDULER_WEBHOOK_ALLOW_PRIVATE": ["127.0.0.1"],
    "SCHEDULER_WEBHOOK_TIMEOUT": 5.0,
}


def watched(world: World, key: str = "nightly", **fields: Any) -> Schedule:
    """An alpha schedule with its own recipients unless `fields` say otherwise."""
    values: dict[str, Any] = {"notify_emails": ["ops@example.com"], **fields}
    return make_schedule(world.alpha, key, utcnow() + timedelta(hours=1), **values)


def finish(schedule: Schedule, worker_id: int, fails: bool, max_attempts: int = 1) -> Run:
    """A run of `schedule` leased and executed as a worker does, its outcome stored."""
    job = "demo.fail" if fails else "demo.echo"
    run = make_run(
        schedule.tenant,
        scheduled_for=utcnow() - timedelta(seconds=5),
        schedule_id=schedule.id,
        job=job,
        args={"message": "boom" if fails else "fine"},
        max_attempts=max_attempts,
    )
    leased = lease_once(db.session(), worker_id, None, TTL, 1)
    assert [lease.id for lease in leased] == [run.id]
    execute_leased(leased[0], worker_id)
    db.session.expire_all()
    return run


def outbox(schedule_id: int | None = None) -> list[Notification]:
    db.session.expire_all()
    query = select(Notification).order_by(Notification.id)
    if schedule_id is not None:
        query = query.where(Notification.schedule_id == schedule_id)
    return list(db.session.scalars(query))


def schedule_now(schedule_id: int) -> Schedule:
    db.session.expire_all()
    found = db.session.get(Schedule, schedule_id)
    assert found is not None
    return found


# --- Writing the outbox ----------------------------------------------------------------------


def test_a_failure_after_the_last_attempt_writes_one_row_per_recipient(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(
        world,
        notify_emails=["ops@example.com", "dev@example.com"],
        notify_webhook_url="https://hooks.example.com/cron",
    )
    run = finish(schedule, make_worker().id, fails=True)

    rows = outbox()
    assert [(row.event, row.channel, row.target, row.status) for row in rows] == [
        ("failure", "email", "ops@example.com", "pending"),
        ("failure", "email", "dev@example.com", "pending"),
        ("failure", "webhook", "https://hooks.example.com/cron", "pending"),
    ]
    assert {row.run_id for row in rows} == {run.id}
    assert len({row.idempotency_key for row in rows}) == 3
    assert "nightly" in rows[0].subject and f"run #{run.id}" in rows[0].subject
    assert "boom" in rows[0].body
    document = json.loads(rows[2].body)
    assert document["event"] == "failure"
    assert document["tenant"] == "alpha"
    assert document["schedule"]["key"] == "nightly"
    assert document["run_id"] == run.id and document["status"] == "failed"
    assert schedule_now(schedule.id).consecutive_failures == 1
    # A webhook needs the tenant's secret to be signed: made with the first webhook row.
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None and tenant.webhook_secret and len(tenant.webhook_secret) == 64


def test_a_retry_that_will_run_again_writes_nothing(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(world)
    run = finish(schedule, make_worker().id, fails=True, max_attempts=2)

    assert db.session.get(Run, run.id).status == "queued"  # type: ignore[union-attr]
    assert outbox() == []
    assert schedule_now(schedule.id).consecutive_failures == 0


def test_a_success_after_failures_writes_a_recovery(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    reconfigure(app, SCHEDULER_NOTIFY_WINDOW=0)  # no flapping window: every message goes out
    schedule = watched(world)
    worker = make_worker().id
    finish(schedule, worker, fails=True)
    finish(schedule, worker, fails=True)
    assert schedule_now(schedule.id).consecutive_failures == 2
    recovered = finish(schedule, worker, fails=False)

    rows = outbox()
    assert [(row.event, row.status) for row in rows] == [
        ("failure", "pending"),
        ("failure", "pending"),
        ("recovery", "pending"),
    ]
    assert rows[-1].run_id == recovered.id
    assert schedule_now(schedule.id).consecutive_failures == 0


def test_successes_of_a_schedule_that_was_not_failing_write_nothing(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(world)
    worker = make_worker().id
    finish(schedule, worker, fails=False)
    finish(schedule, worker, fails=False)

    assert outbox() == []
    assert schedule_now(schedule.id).consecutive_failures == 0


def test_a_flapping_schedule_is_notified_once_per_window(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(world)
    worker = make_worker().id
    finish(schedule, worker, fails=True)
    finish(schedule, worker, fails=False)
    finish(schedule, worker, fails=True)

    rows = outbox()
    assert [(row.event, row.status) for row in rows] == [
        ("failure", "pending"),
        ("recovery", "suppressed"),
        ("failure", "suppressed"),
    ]
    # Once the window has passed, the schedule is notified again.
    for row in rows:
        row.created_at = utcnow() - timedelta(seconds=3601)
    db.session.commit()
    finish(schedule, worker, fails=False)
    assert [(row.event, row.status) for row in outbox()][-1] == ("recovery", "pending")


def test_it_pauses_itself_after_n_failed_runs_in_a_row_and_says_so(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(world, pause_after_failures=2)
    worker = make_worker().id
    finish(schedule, worker, fails=True)
    assert schedule_now(schedule.id).active
    last = finish(schedule, worker, fails=True)

    paused = schedule_now(schedule.id)
    assert not paused.active
    assert paused.inactive_reason == f"paused after 2 failed runs in a row (last: run #{last.id})"
    rows = outbox()
    # The second failure falls in the window; the pause is never suppressed.
    assert [(row.event, row.status) for row in rows] == [
        ("failure", "pending"),
        ("failure", "suppressed"),
        ("paused", "pending"),
    ]
    assert "paused after 2 failed runs in a row" in rows[-1].subject


def test_pausing_is_off_by_default(app: Flask, world: World, make_worker: WorkerFactory) -> None:
    schedule = watched(world)
    worker = make_worker().id
    for _ in range(3):
        finish(schedule, worker, fails=True)

    assert schedule_now(schedule.id).active
    assert schedule_now(schedule.id).consecutive_failures == 3


def test_manual_runs_count_as_the_schedules_runs(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    # make_run of a tenant makes manual runs: every run of these tests is one.
    schedule = watched(world, pause_after_failures=1)
    finish(schedule, make_worker().id, fails=True)

    assert not schedule_now(schedule.id).active


def test_the_tenants_defaults_apply_when_the_schedule_names_no_recipients(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    reconfigure(app, SCHEDULER_NOTIFY_WINDOW=0)
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None
    tenant.notify_emails = ["team@example.com"]
    tenant.notify_webhook_url = "https://hooks.example.com/team"
    db.session.commit()
    own = watched(world, "own", notify_emails=["owner@example.com"])
    defaults = watched(world, "defaults", notify_emails=[])
    worker = make_worker().id
    finish(own, worker, fails=True)
    finish(defaults, worker, fails=True)

    assert [row.target for row in outbox(own.id)] == ["owner@example.com"]
    assert [row.target for row in outbox(defaults.id)] == [
        "team@example.com",
        "https://hooks.example.com/team",
    ]


def test_without_any_recipient_nothing_is_written(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(world, notify_emails=[])
    finish(schedule, make_worker().id, fails=True)

    assert outbox() == []
    assert schedule_now(schedule.id).consecutive_failures == 1  # counted all the same


def test_a_dead_workers_last_attempt_is_notified_as_a_failure(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(world, pause_after_failures=1)
    run = make_run(
        world.alpha,
        scheduled_for=utcnow() - timedelta(seconds=5),
        schedule_id=schedule.id,
        max_attempts=1,
    )
    worker = make_worker().id
    lease_once(db.session(), worker, None, TTL, 1)
    start_runs(db.session(), worker, [run.id])  # its job starts ...and the worker dies

    assert reap_once(db.session(), utcnow() + 2 * TTL) == 1

    rows = outbox()
    assert [(row.event, row.run_id) for row in rows] == [("failure", run.id), ("paused", run.id)]
    assert "worker lost" in rows[0].body
    assert not schedule_now(schedule.id).active


def test_an_overdue_schedule_is_notified_once_per_spell(app: Flask, world: World) -> None:
    schedule = watched(world)
    since = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    schedule.overdue_since = since
    db.session.commit()

    assert record_overdue(db.session(), None, [schedule.id], utcnow()) == 1
    assert record_overdue(db.session(), None, [schedule.id], utcnow()) == 0  # the same spell
    db.session.commit()

    [row] = outbox()
    assert (row.event, row.run_id, row.status) == ("overdue", None, "pending")
    assert "overdue since 2026-03-07 12:00:00 UTC" in row.body


# --- Sending ---------------------------------------------------------------------------------


def pending_failure(world: World, make_worker: WorkerFactory, **fields: Any) -> Notification:
    schedule = watched(world, **fields)
    finish(schedule, make_worker().id, fails=True)
    [row] = outbox()
    return row


def test_it_sends_an_email_to_the_smtp_server(
    app: Flask, world: World, smtp_server: SmtpServer, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **smtp_server.settings())
    reconfigure(app, SCHEDULER_BASE_URL="https://cron.example.com/")
    row = pending_failure(world, make_worker)
    now = utcnow()

    assert send_notifications(db.session(), None, make_worker().id, now) == 1

    [received] = smtp_server.messages
    assert received.recipients == ["ops@example.com"]
    assert received.message["Subject"] == row.subject
    assert received.message["To"] == "ops@example.com"
    assert received.message["From"] == "scheduler@example.test"
    assert received.message["X-Scheduler-Idempotency-Key"] == row.idempotency_key
    assert received.message["Message-ID"] == f"<{row.idempotency_key}@example.test>"
    text = received.message.get_content()
    assert f"https://cron.example.com/runs/{row.run_id}" in text
    [sent] = outbox()
    assert (sent.status, sent.attempts, sent.error) == ("sent", 1, None)
    assert sent.sent_at == now
    assert send_notifications(db.session(), None, make_worker().id, now) == 0  # nothing left


def test_it_posts_a_signed_webhook(
    app: Flask, world: World, server: LoopbackServer, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **LOOPBACK)
    row = pending_failure(
        world, make_worker, notify_emails=[], notify_webhook_url=server.url("/cron")
    )

    assert send_notifications(db.session(), None, make_worker().id, utcnow()) == 1

    [request] = server.received
    assert (request.method, request.path) == ("POST", "/cron")
    assert request.headers["Idempotency-Key"] == row.idempotency_key
    assert request.headers["Content-Type"] == "application/json"
    timestamp = request.headers["X-Scheduler-Timestamp"]
    assert abs(int(timestamp) - datetime.now(UTC).timestamp()) < 60
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None and tenant.webhook_secret
    expected = hmac.new(
        tenant.webhook_secret.encode(), f"{timestamp}.".encode() + request.body, hashlib.sha256
    ).hexdigest()
    assert request.headers["X-Scheduler-Signature"] == f"sha256={expected}"
    assert json.loads(request.body)["event"] == "failure"
    assert outbox()[0].status == "sent"


def test_a_webhook_outside_the_allowlist_is_never_sent(
    app: Flask, world: World, server: LoopbackServer, make_worker: WorkerFactory
) -> None:
    # Saved while allowed; the operator has since taken the host off the list.
    reconfigure(app, **{**LOOPBACK, "SCHEDULER_WEBHOOK_ALLOWED_HOSTS": ["hooks.example.com"]})
    pending_failure(world, make_worker, notify_emails=[], notify_webhook_url=server.url())

    send_notifications(db.session(), None, make_worker().id, utcnow())

    assert server.received == []
    [row] = outbox()
    assert row.status == "failed"
    assert "not allowed" in (row.error or "")


def test_a_failed_send_is_retried_with_backoff_then_ends_failed(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **{"SCHEDULER_SMTP_HOST": "127.0.0.1", "SCHEDULER_SMTP_PORT": free_port()})
    pending_failure(world, make_worker)
    worker = make_worker().id
    now = utcnow()

    for attempt in range(1, MAX_ATTEMPTS):
        assert send_notifications(db.session(), None, worker, now) == 1
        [row] = outbox()
        assert (row.status, row.attempts) == ("pending", attempt)
        assert row.available_at == now + BACKOFF[attempt - 1]
        assert row.error and row.error.startswith("SMTP 127.0.0.1:")
        assert send_notifications(db.session(), None, worker, row.available_at - timedelta(1)) == 0
        now = row.available_at

    assert send_notifications(db.session(), None, worker, now) == 1
    [row] = outbox()
    assert (row.status, row.attempts) == ("failed", MAX_ATTEMPTS)
    assert send_notifications(db.session(), None, worker, now + timedelta(days=1)) == 0


def test_email_without_an_smtp_host_fails_at_once(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    pending_failure(world, make_worker)

    send_notifications(db.session(), None, make_worker().id, utcnow())

    [row] = outbox()
    assert (row.status, row.attempts, row.error) == ("failed", 1, NO_SMTP_HOST)


def test_a_row_whose_lease_ran_out_is_sent_again_with_the_same_key(
    app: Flask, world: World, smtp_server: SmtpServer, make_worker: WorkerFactory
) -> None:
    reconfigure(app, **smtp_server.settings())
    row = pending_failure(world, make_worker)
    now = utcnow()
    crashed = make_worker().id
    with write_transaction(db.session):  # a worker leases the row, dies before marking it
        [leased] = lease_notifications(db.session(), crashed, now, now + TTL, 10)
    assert leased.id == row.id

    # Another worker does not take a row under a live lease ...
    assert send_notifications(db.session(), None, make_worker().id, now + TTL / 2) == 0
    # ... and sends it once the lease has run out.
    assert send_notifications(db.session(), None, make_worker().id, now + TTL * 2) == 1

    [received] = smtp_server.messages
    assert received.message["X-Scheduler-Idempotency-Key"] == row.idempotency_key
    [sent] = outbox()
    assert (sent.status, sent.attempts) == ("sent", 2)


def test_a_late_mark_by_the_crashed_worker_changes_nothing(
    app: Flask, world: World, smtp_server: SmtpServer, make_worker: WorkerFactory
) -> None:
    from webapp.scheduler.outbox import SendFailed, mark_failed

    reconfigure(app, **smtp_server.settings())
    pending_failure(world, make_worker)
    now = utcnow()
    slow = make_worker().id
    with write_transaction(db.session):
        [leased] = lease_notifications(db.session(), slow, now, now + TTL, 10)
    send_notifications(db.session(), None, make_worker().id, now + TTL * 2)

    mark_failed(db.session(), slow, leased, SendFailed("too late"), now + TTL * 3)

    [row] = outbox()
    assert (row.status, row.error) == ("sent", None)


# --- Settings: the schedule form, the import, the tenant's page ------------------------------

FORM = {
    "name": "Nightly",
    "job": "demo.echo",
    "args.message": "hello",
    "cron": "0 3 * * *",
    "time_zone": "UTC",
    "misfire_policy": "fire_once",
    "overlap_policy": "allow",
    "active": "on",
}


def field_error(page: str, field: str) -> str:
    found = re.search(rf'<p class="field-error" id="{field}-error">([^<]*)</p>', page)
    assert found, f"no error next to {field}"
    return html.unescape(found.group(1))


def test_the_form_saves_recipients_and_the_pause_limit(app: Flask, world: World) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["hooks.example.com"])
    alice = Panel(app, world.alice)
    response = alice.post(
        "/schedules/new",
        {
            **FORM,
            "notify_emails": "ops@example.com,\n dev@example.com; ops@example.com",
            "notify_webhook_url": "https://hooks.example.com/cron?token=x",
            "pause_after_failures": "3",
        },
    )

    assert response.status_code == 200, response.get_data(as_text=True)
    schedule = db.session.scalars(select(Schedule).where(Schedule.name == "Nightly")).one()
    assert schedule.notify_emails == ["ops@example.com", "dev@example.com"]
    assert schedule.notify_webhook_url == "https://hooks.example.com/cron?token=x"
    assert schedule.pause_after_failures == 3
    page = alice.get(f"/schedules/{schedule.id}/edit").get_data(as_text=True)
    assert "ops@example.com, dev@example.com" in page
    audit = db.session.scalars(select(AuditEvent).where(AuditEvent.object_id == schedule.id)).one()
    assert audit.after is not None and audit.after["pause_after_failures"] == 3


def test_a_webhook_url_outside_the_allowlist_is_refused_at_save_next_to_the_field(
    app: Flask, world: World
) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["hooks.example.com"])
    response = Panel(app, world.alice).post(
        "/schedules/new", {**FORM, "notify_webhook_url": "https://internal.example.net/hook"}
    )

    assert response.status_code == 422
    message = field_error(response.get_data(as_text=True), "notify_webhook_url")
    assert message == (
        "host 'internal.example.net' is not allowed; allowed hosts: hooks.example.com"
    )
    assert db.session.scalars(select(Schedule)).all() == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "notify_emails",
            "ops@example.com, not-an-email",
            "“not-an-email” is not an email address",
        ),
        ("notify_emails", "ops@localhost", "“ops@localhost” is not an email address"),
        ("notify_emails", ",".join(f"u{n}@example.com" for n in range(21)), "at most 5"),
        ("notify_webhook_url", "ftp://hooks.example.com/", "must start with http:// or https://"),
        ("pause_after_failures", "0", "pause after 1 to 1000 failed runs"),
        ("pause_after_failures", "1001", "pause after 1 to 1000 failed runs"),
        ("pause_after_failures", "three", "must be a whole number"),
    ],
)
def test_bad_notification_settings_are_refused_next_to_the_field(
    app: Flask, world: World, field: str, value: str, message: str
) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["hooks.example.com"])
    response = Panel(app, world.alice).post("/schedules/new", {**FORM, field: value})

    assert response.status_code == 422
    assert message in field_error(response.get_data(as_text=True), field)
    assert db.session.scalars(select(Schedule)).all() == []


def test_the_import_takes_and_the_export_gives_the_notification_fields(
    app: Flask, world: World
) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["hooks.example.com"])
    item = {
        "key": "nightly",
        "name": "Nightly",
        "job": "demo.echo",
        "args": {"message": "hi"},
        "cron": "0 3 * * *",
        "time_zone": "UTC",
        "notify_emails": ["ops@example.com"],
        "notify_webhook_url": "https://hooks.example.com/cron",
        "pause_after_failures": 5,
    }
    import_schedules(world.alpha, json.dumps([item]), Actor.cli(), utcnow())
    exported = json.loads(export_schedules(world.alpha))[0]
    assert {k: exported[k] for k in item} == item

    bad = {**item, "notify_webhook_url": "https://elsewhere.example.org/"}
    with pytest.raises(ImportProblems) as refused:
        import_schedules(world.alpha, json.dumps([bad]), Actor.cli(), utcnow())
    assert "notify_webhook_url: host 'elsewhere.example.org' is not allowed" in str(refused.value)


def test_an_admin_sets_the_tenants_defaults_and_rotates_the_secret(
    app: Flask, world: World
) -> None:
    reconfigure(app, SCHEDULER_WEBHOOK_ALLOWED_HOSTS=["hooks.example.com"])
    alice = Panel(app, world.alice)
    assert alice.get("/settings/notifications").status_code == 200

    response = alice.post(
        "/settings/notifications",
        {"notify_emails": "team@example.com", "notify_webhook_url": "https://hooks.example.com/t"},
        htmx=False,
    )
    assert response.status_code == 303
    db.session.expire_all()
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None
    assert tenant.notify_emails == ["team@example.com"]
    assert tenant.notify_webhook_url == "https://hooks.example.com/t"
    first_secret = tenant.webhook_secret
    assert first_secret and len(first_secret) == 64
    assert first_secret in alice.get("/settings/notifications").get_data(as_text=True)

    assert alice.post("/settings/notifications/rotate", htmx=False).status_code == 303
    db.session.expire_all()
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None and tenant.webhook_secret not in (None, first_secret)
    actions = [
        (event.action, json.dumps([event.before, event.after]))
        for event in db.session.scalars(
            select(AuditEvent).where(AuditEvent.object_type == "tenant").order_by(AuditEvent.id)
        )
    ]
    assert [action for action, _ in actions] == [
        "tenant.notifications_updated",
        "tenant.webhook_secret_rotated",
    ]
    assert all(
        first_secret not in text and tenant.webhook_secret not in text for _, text in actions
    )


def test_bad_tenant_defaults_are_refused_next_to_the_field(app: Flask, world: World) -> None:
    response = Panel(app, world.alice).post(
        "/settings/notifications",
        {"notify_emails": "team@", "notify_webhook_url": "https://hooks.example.com/t"},
    )

    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert field_error(page, "notify_emails") == "“team@” is not an email address"
    assert "no hosts are allowed" in field_error(page, "notify_webhook_url")
    db.session.expire_all()
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None and tenant.notify_emails == [] and tenant.webhook_secret is None


def test_a_viewer_reads_the_settings_but_may_not_change_them(app: Flask, world: World) -> None:
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None
    tenant.notify_emails = ["team@example.com"]
    tenant.webhook_secret = "s" * 64
    db.session.commit()
    bob = Panel(app, world.bob)

    page = bob.get("/settings/notifications").get_data(as_text=True)
    assert "team@example.com" in page
    assert "s" * 64 not in page  # the secret is for admins
    assert bob.post("/settings/notifications", {"notify_emails": ""}).status_code == 403
    assert bob.post("/settings/notifications/rotate").status_code == 403
    db.session.expire_all()
    assert db.session.get(Tenant, world.alpha.id).webhook_secret == "s" * 64  # type: ignore[union-attr]


def test_another_tenants_settings_answer_404(app: Flask, world: World) -> None:
    tenant = db.session.get(Tenant, world.alpha.id)
    assert tenant is not None
    tenant.notify_emails = ["alpha-team@example.com"]
    db.session.commit()
    charlie = Panel(app, world.charlie)

    # The page is always the current tenant's; charlie cannot make alpha current.
    assert "alpha-team@example.com" not in charlie.get("/settings/notifications").get_data(
        as_text=True
    )
    assert charlie.post("/tenant", {"tenant": str(world.alpha.id)}, htmx=False).status_code == 404
    charlie.post("/settings/notifications", {"notify_emails": "c@example.com"}, htmx=False)
    db.session.expire_all()
    assert db.session.get(Tenant, world.alpha.id).notify_emails == [  # type: ignore[union-attr]
        "alpha-team@example.com"
    ]
    assert db.session.get(Tenant, world.beta.id).notify_emails == ["c@example.com"]  # type: ignore[union-attr]


def test_the_schedule_page_lists_its_notifications_and_why_it_paused(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    schedule = watched(world, pause_after_failures=1)
    run = finish(schedule, make_worker().id, fails=True)

    page = Panel(app, world.bob).get(f"/schedules/{schedule.id}").get_data(as_text=True)
    section = page[page.index(f'id="schedule-{schedule.id}-notifications"') :]
    assert "ops@example.com" in section and "failure" in section and "paused" in section
    assert f"paused after 1 failed runs in a row (last: run #{run.id})" in page


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_real_worker_emails_the_failure_of_a_schedule(
    app: Flask, world: World, workers: Workers, smtp_server: SmtpServer
) -> None:
    schedule = watched(world)
    make_run(
        world.alpha,
        scheduled_for=utcnow() - timedelta(seconds=1),
        schedule_id=schedule.id,
        job="demo.fail",
        args={"message": "boom"},
    )
    settings = {name: str(value) for name, value in smtp_server.settings().items()}
    workers.start(**settings)

    wait_for(lambda: smtp_server.messages, 60, "the failure's email")
    [received] = smtp_server.messages
    assert received.recipients == ["ops@example.com"]
    assert "failed" in received.message["Subject"]
    wait_for(lambda: outbox() and outbox()[0].status == "sent", 30, "the row marked sent")


def test_a_burst_worker_stops_sending_notifications_when_it_returns(
    app: Flask, world: World
) -> None:
    # In a process the thread would die with it; a worker run in-process (an embedding app, a
    # test) must not leave it sending as a worker that has deregistered.
    result = app.test_cli_runner().invoke(args=["scheduler", "worker", "--burst"])
    assert result.exit_code == 0, result.output
    # Named since this fix; before it, only the function it runs told the thread apart.
    senders = [
        thread
        for thread in threading.enumerate()
        if thread.name == NOTIFICATIONS_THREAD
        or getattr(getattr(thread, "_target", None), "__name__", "") == "send_notifications_loop"
    ]
    assert senders == []
