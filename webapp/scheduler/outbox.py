"""Sending the outbox: the worker's step that delivers notifications (scheduler.notify writes them).

One step leases due rows (a transaction), sends each outside any transaction, and marks each
sent, or due again later, or failed, in a transaction of its own. A worker that dies between
sending and marking leaves the row leased; the lease runs out and a worker sends it again with
the same idempotency key (email: Message-ID and X-Scheduler-Idempotency-Key; webhook:
Idempotency-Key), which is how receivers drop the second copy. A mark only lands while the row
is still this worker's attempt, so a late worker never overwrites a newer one's.

Webhooks go through the SSRF guard that the http.webhook job uses (catalog.ssrf): the allowed hosts,
public addresses only, a connection pinned to the checked addresses, no redirects. The body is
signed: X-Scheduler-Signature: sha256=HEX, HEX = HMAC-SHA256(tenant's webhook secret,
f"{X-Scheduler-Timestamp}.{body}"), the timestamp in unix seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import smtplib
import socket
import ssl
import time
from collections.abc import Sequence
from contextlib import closing
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from sqlalchemy import Integer, bindparam, func, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from webapp.catalog.ssrf import (
    RETRYABLE_CLIENT_ERRORS,
    Deadline,
    Resolver,
    WebhookError,
    WebhookRefused,
    check_webhook_target,
    pinned_connection,
)
from webapp.config import Settings
from webapp.database import UTCDateTime, is_postgresql, write_transaction
from webapp.models import Notification, Tenant
from webapp.scheduler.notify import notify_settings

log = logging.getLogger("webapp.scheduler")

# Waits before the 2nd, 3rd, 4th and 5th attempts; the 5th that fails is the last.
BACKOFF = (
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
)
MAX_ATTEMPTS = len(BACKOFF) + 1
SMTP_TIMEOUT = 30.0  # seconds for each SMTP command
BATCH = 10  # rows per step: sent one after another, so the lease covers them all
ERROR_LIMIT = 2000
USER_AGENT = "webapp-scheduler (notifications)"
NO_SMTP_HOST = "SCHEDULER_SMTP_HOST is not set"


def notification_due(now: Any) -> tuple[Any, ...]:
    """A notification to send by `now`: pending, due, and not held by a live lease."""
    return (
        Notification.status == "pending",
        Notification.available_at <= now,
        or_(Notification.locked_until.is_(None), Notification.locked_until < now),
    )


def notification_lease_statement(skip_locked: bool) -> Any:
    """The outbox's lease: pending rows that are due and not held by a live lease get this
    worker, a lease and one more attempt; built once per dialect. A row stays `pending` while
    it is sent, so that the lease of a worker that died runs out and another worker sends it.

    Tenants take turns, as the lease of runs does (lease_query): each due row's turn is its
    rank among its tenant's due rows (oldest first), and the lease takes the lowest turns
    (ties: oldest first). A tenant's flood of 200 messages so delays another tenant's one
    message by no more than one row of each tenant ahead of it, never by the flood. The rows
    are locked after they are chosen (PostgreSQL forbids a lock beside a window function):
    one that a concurrent lease holds is skipped, and this lease takes fewer."""
    due = notification_due(bindparam("now", type_=UTCDateTime))
    turn = func.row_number().over(
        partition_by=Notification.tenant_id,
        order_by=(Notification.available_at, Notification.id),
    )
    ranked = (
        select(Notification.id, Notification.available_at, turn.label("turn"))
        .where(*due)
        .subquery("ranked")
    )
    chosen = (
        select(ranked.c.id)
        .order_by(ranked.c.turn, ranked.c.available_at, ranked.c.id)
        .limit(bindparam("limit", type_=Integer))
    )
    candidates = select(Notification.id).where(Notification.id.in_(chosen), *due)
    if skip_locked:
        candidates = candidates.with_for_update(skip_locked=True, key_share=True)
    secret = select(Tenant.webhook_secret).where(Tenant.id == Notification.tenant_id)
    return (
        update(Notification)
        .where(Notification.id.in_(candidates.scalar_subquery()))
        .values(
            worker_id=bindparam("worker_id", type_=Integer),
            locked_until=bindparam("locked_until", type_=UTCDateTime),
            attempts=Notification.attempts + 1,
        )
        .returning(
            Notification.id,
            Notification.channel,
            Notification.target,
            Notification.subject,
            Notification.body,
            Notification.idempotency_key,
            Notification.attempts,
            secret.scalar_subquery().label("webhook_secret"),
        )
        .execution_options(synchronize_session=False)
    )


LEASE_NOTIFICATIONS_SKIP_LOCKED = notification_lease_statement(skip_locked=True)
LEASE_NOTIFICATIONS = notification_lease_statement(skip_locked=False)


def any_notification_due(session: Session, now: datetime) -> bool:
    """Whether the outbox has a row to send: the oldest, in the order of the partial index on
    pending rows (asked for any one, PostgreSQL read the table from its start where its
    statistics said most rows were pending)."""
    query = (
        select(Notification.id)
        .where(*notification_due(now))
        .order_by(Notification.available_at)
        .limit(1)
    )
    return session.scalar(query) is not None


def lease_notifications(
    session: Session, worker_id: int, now: datetime, locked_until: datetime, limit: int
) -> Sequence[Row[Any]]:
    """Takes up to `limit` due notifications for this worker until `locked_until`."""
    statement = LEASE_NOTIFICATIONS_SKIP_LOCKED if is_postgresql(session) else LEASE_NOTIFICATIONS
    parameters = {"now": now, "locked_until": locked_until, "limit": limit, "worker_id": worker_id}
    return session.connection().execute(statement, parameters).all()


class SendFailed(Exception):
    """Why a notification was not delivered; `permanent`: no retry can fix it."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The X-Scheduler-Signature value: sha256=HMAC-SHA256(secret, "{timestamp}.{body}")."""
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def message_id(idempotency_key: str, sender: str) -> str:
    """The email's Message-ID, the same for every resend of the notification."""
    domain = sender.rpartition("@")[2] or "localhost"
    return f"<{idempotency_key}@{domain}>"


def send_email(row: Row[Any], config: Settings) -> None:
    host = config.SCHEDULER_SMTP_HOST
    if not host:
        raise SendFailed(NO_SMTP_HOST, permanent=True)
    sender = config.SCHEDULER_SMTP_FROM
    email = EmailMessage()
    email["From"] = sender
    email["To"] = row.target
    email["Subject"] = row.subject
    email["Date"] = formatdate(localtime=False)
    email["Message-ID"] = message_id(row.idempotency_key, sender)
    email["X-Scheduler-Idempotency-Key"] = row.idempotency_key
    email.set_content(row.body)
    port = config.SCHEDULER_SMTP_PORT
    security = config.SCHEDULER_SMTP_SECURITY
    try:
        client: smtplib.SMTP
        if security == "ssl":
            context = ssl.create_default_context()
            client = smtplib.SMTP_SSL(host, port, timeout=SMTP_TIMEOUT, context=context)
        else:
            client = smtplib.SMTP(host, port, timeout=SMTP_TIMEOUT)
        with client:
            if security == "starttls":
                client.starttls(context=ssl.create_default_context())
            username = config.SCHEDULER_SMTP_USERNAME
            if username:
                client.login(username, config.SCHEDULER_SMTP_PASSWORD)
            client.send_message(email)
    except (OSError, smtplib.SMTPException) as error:
        # The server's words (never the password, which smtplib does not echo).
        raise SendFailed(f"SMTP {host}:{port}: {error}") from error


def send_webhook(row: Row[Any], config: Settings, resolve: Resolver = socket.getaddrinfo) -> None:
    if not row.webhook_secret:
        raise SendFailed("the tenant has no webhook secret", permanent=True)
    try:
        timeout = config.SCHEDULER_WEBHOOK_TIMEOUT
        target = check_webhook_target(
            row.target,
            config.SCHEDULER_WEBHOOK_ALLOWED_HOSTS,
            config.SCHEDULER_WEBHOOK_ALLOW_PRIVATE,
            resolve,
        )
    except WebhookRefused as refused:
        raise SendFailed(str(refused), permanent=True) from None
    except WebhookError as error:
        raise SendFailed(str(error)) from None
    body = row.body.encode()
    timestamp = str(int(time.time()))
    headers = {
        "User-Agent": USER_AGENT,
        "Content-Type": "application/json",
        "Idempotency-Key": row.idempotency_key,
        "X-Scheduler-Timestamp": timestamp,
        "X-Scheduler-Signature": signature(row.webhook_secret, timestamp, body),
    }
    with closing(pinned_connection(target, Deadline(timeout))) as connection:
        try:
            connection.request("POST", target.url.target, body=body, headers=headers)
            with connection.getresponse() as response:
                status = response.status
                response.read(4096)
        except (OSError, http.client.HTTPException) as error:
            raise SendFailed(f"webhook request to {target.url.shown} failed: {error}") from None
    if not 200 <= status < 300:
        message = f"webhook {target.url.shown} answered HTTP {status}"
        # A 4xx answer says the request itself is wrong: sending it again changes nothing.
        permanent = 400 <= status < 500 and status not in RETRYABLE_CLIENT_ERRORS
        raise SendFailed(message, permanent=permanent)


def deliver(row: Row[Any], config: Settings) -> None:
    if row.channel == "email":
        send_email(row, config)
    else:
        send_webhook(row, config)


def lease_length(config: Settings, limit: int) -> timedelta:
    """Long enough to send the whole batch at the slowest, and a minute more."""
    webhook_timeout = config.SCHEDULER_WEBHOOK_TIMEOUT
    return timedelta(seconds=limit * max(webhook_timeout, SMTP_TIMEOUT) + 60)


def send_notifications(
    session: Session,
    settings: Settings | None,
    worker_id: int,
    now: datetime,
    limit: int = BATCH,
) -> int:
    """Sends up to `limit` due notifications; returns how many were taken (0: nothing due)."""
    config = notify_settings(settings)
    due = any_notification_due(session, now)  # no write lock for an empty outbox
    session.commit()  # ends the read: a snapshot kept open would never see new rows (SQLite)
    if not due:
        return 0
    with write_transaction(session):
        leased = lease_notifications(
            session, worker_id, now, now + lease_length(config, limit), limit
        )
    for row in leased:
        try:
            deliver(row, config)
        except SendFailed as failed:
            mark_failed(session, worker_id, row, failed, now)
        else:
            mark_sent(session, worker_id, row, now)
    return len(leased)


def still_ours(row: Row[Any], worker_id: int) -> Any:
    """This worker's attempt at the row, not one that another worker began since."""
    return (
        (Notification.id == row.id)
        & (Notification.worker_id == worker_id)
        & (Notification.attempts == row.attempts)
        & (Notification.status == "pending")
    )


def mark_sent(session: Session, worker_id: int, row: Row[Any], now: datetime) -> None:
    with write_transaction(session):
        session.execute(
            update(Notification)
            .where(still_ours(row, worker_id))
            .values(status="sent", sent_at=now, locked_until=None, error=None)
            .execution_options(synchronize_session=False)
        )
    log.info(
        "notification_sent",
        extra={"action": "notification_sent", "notification_id": row.id, "channel": row.channel},
    )


def mark_failed(
    session: Session, worker_id: int, row: Row[Any], failed: SendFailed, now: datetime
) -> None:
    """Due again after the backoff, or `failed` for good after the last attempt."""
    error = str(failed)[:ERROR_LIMIT]
    final = failed.permanent or row.attempts >= MAX_ATTEMPTS
    values: dict[str, Any] = {"locked_until": None, "error": error}
    if final:
        values["status"] = "failed"
    else:
        values["available_at"] = now + BACKOFF[row.attempts - 1]
    with write_transaction(session):
        session.execute(
            update(Notification)
            .where(still_ours(row, worker_id))
            .values(**values)
            .execution_options(synchronize_session=False)
        )
    log.warning(
        "notification_failed" if final else "notification_retrying",
        extra={
            "action": "notification_failed" if final else "notification_retrying",
            "notification_id": row.id,
            "channel": row.channel,
            "attempt": row.attempts,
            "error": error,
        },
    )
