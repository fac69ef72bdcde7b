"""Notifications, written: who hears of a failure, a recovery, an overdue or a paused schedule.

A notification is a row of the outbox (`notifications`), written in the transaction that decided
it: a run's outcome (execution.store_outcomes), a reaped run (leases.reap_once), the overdue
watchdog's flag. A worker sends the rows later (outbox.send_notifications). Each row has an
idempotency key made of what it is about, so that writing the same event twice (a late outcome
after the reaper's, a watchdog that runs twice) is a no-op, and a receiver can drop a resend.

Recipients: the schedule's own addresses and webhook URL; where it has neither, the tenant's
defaults; with none at all, nothing is written. One row per recipient.

Flapping: a schedule that was notified (a row not suppressed) within SCHEDULER_NOTIFY_WINDOW
gets its new rows written `suppressed`: kept for the history, never sent. Every kind of event is
suppressed within its window: failures, recoveries and overdues share the schedule's window (a
flapping schedule), `paused` has its own (one per window however often someone resumes a
schedule that pauses itself again), so that a pause right after a failure is still heard of.

Floods: a schedule names at most SCHEDULER_NOTIFY_MAX_RECIPIENTS addresses (checked where they
are set), and a tenant sends at most SCHEDULER_NOTIFY_MAX_PER_HOUR messages in each UTC clock
hour. An event whose messages do not fit in what is left of the hour is written `suppressed`
with the reason HELD_BACK, and the tenant's digest of the hour ("37 more notifications
suppressed") goes out when the hour ends, to the tenant's default recipients (else to those of
the first event held back): one row per recipient and hour, its count written again while it is
not yet sent. The room is counted without a lock on the tenant (whose row the lock order keeps
for edits): two workers storing outcomes of one tenant at the same moment may each use what is
left, so the limit bounds a flood to within a batch; it is not an exact quota.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from webapp.config import Settings, settings
from webapp.database import among_ids, is_postgresql
from webapp.models import (
    Notification,
    NotificationChannel,
    NotificationEvent,
    Run,
    Schedule,
    Tenant,
)
from webapp.scheduler.fire_ahead import withdraw_fires_ahead

SUBJECT_LIMIT = 300  # the column's width
# The error of a row suppressed because its tenant had reached SCHEDULER_NOTIFY_MAX_PER_HOUR;
# the digest counts them.
HELD_BACK = "held back: the tenant's hourly limit of notifications (SCHEDULER_NOTIFY_MAX_PER_HOUR)"


@dataclass(frozen=True)
class NotifyEvent:
    """Something a schedule's owners hear of: its run (failure, recovery, paused) or the time
    the watchdog found it overdue (overdue)."""

    kind: NotificationEvent
    schedule_id: int
    run_id: int | None = None
    overdue_since: datetime | None = None


@dataclass(frozen=True)
class FinishedAttempt:
    """A run that ended for good (a retry still to come is not one): what the failure count
    and the notifications need of it."""

    run_id: int
    schedule_id: int | None
    succeeded: bool


def notify_settings(given: Settings | None) -> Settings:
    """The given settings, or the app's (the worker's steps run in its app context)."""
    return given if given is not None else settings()


def pause_reason(failures: int, run_id: int) -> str:
    return f"paused after {failures} failed runs in a row (last: run #{run_id})"


def recovery_statement(postgresql: bool) -> Any:
    """Resets the failure count of the schedules among :ids that were failing; returns those.
    Built once per dialect: it runs with every outcome batch, and building it (an ORM bulk
    UPDATE, a placeholder per id) cost the worker more than running it."""
    return (
        update(Schedule)
        .where(among_ids(Schedule.id, postgresql), Schedule.consecutive_failures > 0)
        .values(consecutive_failures=0)
        .returning(Schedule.id)
    )


RECOVER = {True: recovery_statement(True), False: recovery_statement(False)}


def lock_failure_counts(session: Session, schedule_ids: list[int]) -> Sequence[Any]:
    """The failure counts of these schedules, locked for the caller's transaction (in id order,
    so that two workers storing outcomes never wait on each other in a circle): the count goes
    on from what the last transaction wrote. SQLite: the write transaction is the lock."""
    if not schedule_ids:
        return []
    query = (
        select(
            Schedule.id,
            Schedule.consecutive_failures,
            Schedule.pause_after_failures,
            Schedule.active,
        )
        .where(Schedule.id.in_(schedule_ids))
        .order_by(Schedule.id)
    )
    if is_postgresql(session):
        query = query.with_for_update(of=Schedule, key_share=True)
    return session.execute(query).all()


def record_finished_runs(
    session: Session,
    settings: Settings | None,
    finished: Sequence[FinishedAttempt],
    now: datetime,
) -> int:
    """Counts failures in a row per schedule, pauses those that reach their limit, and writes
    the notifications of it all, in the caller's transaction. `finished`: in the order the runs
    ended. Returns the number of notification rows written.

    A batch of successes of schedules that were not failing costs one UPDATE that changes
    nothing; the rest (failures, recoveries) is rare and pays a few statements more.
    """
    sequences: dict[int, list[FinishedAttempt]] = {}
    for attempt in finished:
        if attempt.schedule_id is not None:
            sequences.setdefault(attempt.schedule_id, []).append(attempt)
    if not sequences:
        return 0
    events: list[NotifyEvent] = []
    only_successes = sorted(
        schedule_id
        for schedule_id, attempts in sequences.items()
        if all(attempt.succeeded for attempt in attempts)
    )
    if only_successes:
        statement = RECOVER[is_postgresql(session)]
        recovered = session.connection().execute(statement, {"ids": only_successes}).scalars()
        for schedule_id in sorted(recovered):
            first_success = sequences[schedule_id][0]
            events.append(NotifyEvent("recovery", schedule_id, first_success.run_id))
    failing = sorted(set(sequences) - set(only_successes))
    for row in lock_failure_counts(session, failing):
        count, active = row.consecutive_failures, row.active
        changes: dict[str, Any] = {}
        for attempt in sequences[row.id]:
            if attempt.succeeded:
                if count > 0:
                    events.append(NotifyEvent("recovery", row.id, attempt.run_id))
                count = 0
                continue
            count += 1
            events.append(NotifyEvent("failure", row.id, attempt.run_id))
            limit = row.pause_after_failures
            if active and limit is not None and count >= limit:
                active = False
                changes.update(active=False, inactive_reason=pause_reason(count, attempt.run_id))
                events.append(NotifyEvent("paused", row.id, attempt.run_id))
        if changes:  # paused: a run queued ahead of its fire time must not start either
            withdraw_fires_ahead(session, [row.id], now)
        session.execute(
            update(Schedule)
            .where(Schedule.id == row.id)
            .values(consecutive_failures=count, **changes)
            .execution_options(synchronize_session=False)
        )
    return record_events(session, settings, events, now)


def record_overdue(
    session: Session,
    settings: Settings | None,
    schedule_ids: Iterable[int],
    now: datetime,
) -> int:
    """For the overdue watchdog, in the transaction that flagged the schedules: an `overdue`
    notification for each schedule that has just become overdue (`overdue_since` set). Calling
    it again for the same spell of lateness writes nothing (the key holds `overdue_since`)."""
    ids = sorted(set(schedule_ids))
    if not ids:
        return 0
    rows = session.execute(
        select(Schedule.id, Schedule.overdue_since).where(Schedule.id.in_(ids))
    ).all()
    events = [
        NotifyEvent("overdue", schedule_id, overdue_since=since or now)
        for schedule_id, since in rows
    ]
    return record_events(session, settings, events, now)


@dataclass(frozen=True)
class Recipients:
    emails: tuple[str, ...]
    webhook_url: str | None

    def targets(self) -> list[tuple[NotificationChannel, str]]:
        found: list[tuple[NotificationChannel, str]] = [("email", email) for email in self.emails]
        if self.webhook_url:
            found.append(("webhook", self.webhook_url))
        return found


def recipients(schedule: Any) -> Recipients:
    """The schedule's own recipients; where it names none, the tenant's defaults."""
    own = Recipients(tuple(schedule.notify_emails or ()), schedule.notify_webhook_url or None)
    if own.targets():
        return own
    return Recipients(tuple(schedule.tenant_emails or ()), schedule.tenant_webhook_url or None)


def idempotency_key(
    event: NotifyEvent, channel: NotificationChannel, target: str, overdue_since: str
) -> str:
    """What the message is about and to whom: the same event to the same recipient is always
    the same key. The target is hashed (a URL may be 2,000 characters; the key holds 200)."""
    about = f"run.{event.run_id}" if event.run_id is not None else f"schedule.{event.schedule_id}"
    if event.kind == "overdue":
        about += f".{overdue_since}"
    return f"{event.kind}.{about}.{channel}.{hashed(target)}"


def hashed(target: str) -> str:
    """A recipient in an idempotency key: hashed (a URL may be 2,000 characters)."""
    return hashlib.sha256(target.encode()).hexdigest()[:24]


def record_events(
    session: Session,
    settings: Settings | None,
    events: Sequence[NotifyEvent],
    now: datetime,
) -> int:
    """Writes the outbox rows of `events` (in the caller's transaction): one per recipient,
    suppressed within the flapping window; a row already written is left alone. Returns the
    number of rows written."""
    if not events:
        return 0
    config = notify_settings(settings)
    schedule_ids = sorted({event.schedule_id for event in events})
    schedules = {
        row.id: row
        for row in session.execute(
            select(
                Schedule.id,
                Schedule.tenant_id,
                Schedule.key,
                Schedule.name,
                Schedule.notify_emails,
                Schedule.notify_webhook_url,
                Schedule.inactive_reason,
                Tenant.slug.label("tenant_slug"),
                Tenant.notify_emails.label("tenant_emails"),
                Tenant.notify_webhook_url.label("tenant_webhook_url"),
                Tenant.webhook_secret.label("tenant_secret"),
            )
            .join(Tenant, Tenant.id == Schedule.tenant_id)  # system schedules notify nobody
            .where(Schedule.id.in_(schedule_ids))
        )
    }
    run_ids = sorted({event.run_id for event in events if event.run_id is not None})
    runs = {
        row.id: row
        for row in session.execute(
            select(Run.id, Run.status, Run.error, Run.scheduled_for, Run.trigger).where(
                Run.id.in_(run_ids)
            )
        )
    }
    window = timedelta(seconds=config.SCHEDULER_NOTIFY_WINDOW)
    notified = notified_within(session, schedule_ids, now - window)
    hour = clock_hour(now)
    tenant_ids = sorted({row.tenant_id for row in schedules.values()})
    left = hourly_room(session, tenant_ids, hour, config.SCHEDULER_NOTIFY_MAX_PER_HOUR)
    held: dict[int, Any] = {}  # tenant id: the schedule of its first event held back
    base_url = config.SCHEDULER_BASE_URL.rstrip("/")
    rows: list[dict[str, Any]] = []
    needs_secret: set[int] = set()
    for event in events:
        schedule = schedules.get(event.schedule_id)
        if schedule is None:
            continue
        targets = recipients(schedule).targets()
        if not targets:
            continue
        about = (event.schedule_id, window_of(event.kind))
        suppressed, reason = about in notified, None
        if not suppressed and len(targets) > left[schedule.tenant_id]:
            suppressed, reason = True, HELD_BACK
            held.setdefault(schedule.tenant_id, schedule)
            if schedule.tenant_secret is None:  # the digest may go to the tenant's webhook
                needs_secret.add(schedule.tenant_id)
        elif not suppressed:
            left[schedule.tenant_id] -= len(targets)
            notified.add(about)
        run = runs.get(event.run_id) if event.run_id is not None else None
        message = Message.of(event, schedule, run, base_url)
        since = event.overdue_since.isoformat() if event.overdue_since else ""
        for channel, target in targets:
            if channel == "webhook" and schedule.tenant_secret is None:
                needs_secret.add(schedule.tenant_id)
            rows.append(
                {
                    "tenant_id": schedule.tenant_id,
                    "schedule_id": event.schedule_id,
                    "run_id": event.run_id,
                    "event": event.kind,
                    "channel": channel,
                    "target": target,
                    "subject": message.subject,
                    "body": message.email_text if channel == "email" else message.webhook_json,
                    "idempotency_key": idempotency_key(event, channel, target, since),
                    "status": "suppressed" if suppressed else "pending",
                    "attempts": 0,
                    "available_at": now,
                    "created_at": now,
                    "error": reason,
                }
            )
    for tenant_id in sorted(needs_secret):
        # The key of the webhook's signature, made when first needed (as the settings page does).
        session.execute(
            update(Tenant)
            .where(Tenant.id == tenant_id, Tenant.webhook_secret.is_(None))
            .values(webhook_secret=secrets.token_hex(32))
            .execution_options(synchronize_session=False)
        )
    written = insert_notifications(session, rows)
    for tenant_id in sorted(held):
        write_digest(session, config, held[tenant_id], hour, now)
    return written


def window_of(kind: NotificationEvent) -> str:
    """Which window an event falls in: `paused` has its own; the others share the flapping
    schedule's."""
    return "paused" if kind == "paused" else "flapping"


def notified_within(
    session: Session, schedule_ids: list[int], since: datetime
) -> set[tuple[int, str]]:
    """(schedule id, window) of the schedules notified (a row not suppressed) after `since`."""
    found = session.execute(
        select(Notification.schedule_id, Notification.event)
        .where(
            Notification.schedule_id.in_(schedule_ids),
            Notification.status != "suppressed",
            Notification.created_at > since,
        )
        .distinct()
    )
    return {
        (schedule_id, window_of(kind)) for schedule_id, kind in found if schedule_id is not None
    }


def clock_hour(now: datetime) -> datetime:
    """The start of the UTC clock hour of `now`: the hourly limit's and the digest's hour."""
    return now.replace(minute=0, second=0, microsecond=0)


def hourly_room(
    session: Session, tenant_ids: list[int], hour: datetime, limit: int
) -> dict[int, int]:
    """How many messages each tenant may still send in the hour that starts at `hour`: the
    limit less its rows of the hour not suppressed (digests aside)."""
    counted = session.execute(
        select(Notification.tenant_id, func.count())
        .where(
            Notification.tenant_id.in_(tenant_ids),
            Notification.status != "suppressed",
            Notification.event != "digest",
            Notification.created_at >= hour,
        )
        .group_by(Notification.tenant_id)
    )
    sent: dict[int | None, int] = {tenant_id: count for tenant_id, count in counted}
    return {tenant_id: limit - sent.get(tenant_id, 0) for tenant_id in tenant_ids}


def write_digest(
    session: Session, config: Settings, schedule: Any, hour: datetime, now: datetime
) -> None:
    """The tenant's digest of the hour: how many messages its limit has held back so far, due
    when the hour ends; written again (its count) while no worker has taken it."""
    end = hour + timedelta(hours=1)
    count = session.scalar(
        select(func.count()).where(
            Notification.tenant_id == schedule.tenant_id,
            Notification.status == "suppressed",
            Notification.error == HELD_BACK,
            Notification.created_at >= hour,
            Notification.created_at < end,
        )
    )
    defaults = Recipients(tuple(schedule.tenant_emails or ()), schedule.tenant_webhook_url or None)
    targets = (defaults if defaults.targets() else recipients(schedule)).targets()
    digest = Digest.of(schedule.tenant_slug, count or 0, hour, config)
    rows = [
        {
            "tenant_id": schedule.tenant_id,
            "event": "digest",
            "channel": channel,
            "target": target,
            "subject": digest.subject,
            "body": digest.email_text if channel == "email" else digest.webhook_json,
            "idempotency_key": (
                f"digest.tenant.{schedule.tenant_id}.{hour:%Y%m%dT%H}.{channel}.{hashed(target)}"
            ),
            "status": "pending",
            "attempts": 0,
            "available_at": end,
            "created_at": now,
        }
        for channel, target in targets
    ]
    insert = postgresql_insert if is_postgresql(session) else sqlite_insert
    statement = insert(Notification)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["idempotency_key"],
            set_={"subject": statement.excluded.subject, "body": statement.excluded.body},
            where=(Notification.status == "pending") & (Notification.attempts == 0),
        ),
        rows,
    )


def insert_notifications(session: Session, rows: list[dict[str, Any]]) -> int:
    """One INSERT; a row whose idempotency key is already written is skipped."""
    if not rows:
        return 0
    insert = postgresql_insert if is_postgresql(session) else sqlite_insert
    statement = (
        insert(Notification)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(Notification.id)
    )
    return len(session.execute(statement, rows).all())


@dataclass(frozen=True)
class Message:
    subject: str
    email_text: str
    webhook_json: str

    @classmethod
    def of(cls, event: NotifyEvent, schedule: Any, run: Any, base_url: str) -> Message:
        name, slug = schedule.name, schedule.tenant_slug
        error = (run.error or "").strip().partition("\n")[0] if run is not None else ""
        if base_url and run is not None:
            url = f"{base_url}/runs/{run.id}"
        elif base_url:
            url = f"{base_url}/schedules/{schedule.id}"
        else:
            url = None
        run_label = f"run #{run.id}" if run is not None else ""
        subject = {
            "failure": f"[{slug}] “{name}” failed ({run_label})",
            "recovery": f"[{slug}] “{name}” succeeded again ({run_label})",
            "paused": f"[{slug}] “{name}” was paused: {schedule.inactive_reason}",
            "overdue": f"[{slug}] “{name}” is overdue",
        }[event.kind]
        lines = [
            {
                "failure": f"The schedule “{name}” failed after its last attempt.",
                "recovery": f"The schedule “{name}” succeeded again after failed runs.",
                "paused": f"The schedule “{name}” was paused: {schedule.inactive_reason}. "
                "It fires again once someone resumes it.",
                "overdue": f"The schedule “{name}” has not run since it was due "
                f"(overdue since {event.overdue_since:%Y-%m-%d %H:%M:%S} UTC)."
                if event.overdue_since
                else f"The schedule “{name}” is overdue.",
            }[event.kind],
            "",
            f"Tenant: {slug}",
            f"Schedule: {name} ({schedule.key})",
        ]
        if run is not None:
            lines.append(f"Run: #{run.id}, {run.status}")
            lines.append(f"Scheduled for: {run.scheduled_for:%Y-%m-%d %H:%M:%S} UTC")
            if error:
                lines.append(f"Error: {error}")
        if url:
            lines.append(f"Details: {url}")
        document = {
            "event": event.kind,
            "tenant": slug,
            "schedule": {"id": schedule.id, "key": schedule.key, "name": name},
            "run_id": run.id if run is not None else None,
            "status": run.status if run is not None else None,
            "error": error or None,
            "scheduled_for": run.scheduled_for.isoformat() if run is not None else None,
            "overdue_since": event.overdue_since.isoformat() if event.overdue_since else None,
            "reason": schedule.inactive_reason if event.kind == "paused" else None,
            "url": url,
        }
        return cls(
            subject=one_line(subject)[:SUBJECT_LIMIT],
            email_text="\n".join(lines) + "\n",
            webhook_json=json.dumps(document, ensure_ascii=False, separators=(",", ":")),
        )


def one_line(text: str) -> str:
    """A subject is one line: a header cannot hold a line break."""
    return " ".join(text.split())


@dataclass(frozen=True)
class Digest:
    """What a tenant's hourly limit held back: "37 more notifications suppressed"."""

    subject: str
    email_text: str
    webhook_json: str

    @classmethod
    def of(cls, slug: str, count: int, hour: datetime, config: Settings) -> Digest:
        end = hour + timedelta(hours=1)
        limit = config.SCHEDULER_NOTIFY_MAX_PER_HOUR
        more = f"{count} more notification{'' if count == 1 else 's'} suppressed"
        base_url = config.SCHEDULER_BASE_URL.rstrip("/")
        lines = [
            f"{more} between {hour:%Y-%m-%d %H:%M} and {end:%H:%M} UTC: the tenant sends at most "
            f"{limit} notifications an hour. Each schedule's page lists its notifications.",
            "",
            f"Tenant: {slug}",
        ]
        if base_url:
            lines.append(f"Schedules: {base_url}/")
        document = {
            "event": "digest",
            "tenant": slug,
            "suppressed": count,
            "from": hour.isoformat(),
            "until": end.isoformat(),
            "limit": limit,
        }
        return cls(
            subject=one_line(f"[{slug}] {more}")[:SUBJECT_LIMIT],
            email_text="\n".join(lines) + "\n",
            webhook_json=json.dumps(document, ensure_ascii=False, separators=(",", ":")),
        )
