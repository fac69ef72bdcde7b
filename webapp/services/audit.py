"""Who did what: every change writes an audit event in the same transaction as the change."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_
from sqlalchemy.orm import Session

from webapp.database import utcnow
from webapp.models import AuditEvent, Schedule, User
from webapp.services import scope
from webapp.services.schema import ScheduleIn
from webapp.token_models import ApiToken


@dataclass(frozen=True)
class Actor:
    """The person or process behind a change, as the audit log shows it."""

    user_id: int | None
    label: str

    @classmethod
    def for_user(cls, user: User) -> Actor:
        return cls(user_id=user.id, label=user.email)

    @classmethod
    def cli(cls) -> Actor:
        return cls(user_id=None, label="cli")

    @classmethod
    def for_token(cls, token: ApiToken) -> Actor:
        """An API token: named by its prefix, which the token list shows, and its name."""
        kind = "operator token" if token.is_operator else "token"
        return cls(user_id=None, label=f"{kind} {token.prefix} ({token.name})")


SCHEDULER = Actor(user_id=None, label="scheduler")
DEFAULTS = Actor(user_id=None, label="defaults")

# What a user may change in a schedule: every field of ScheduleIn, in its order (the audit log's
# changes, the ETag, the export and its import). A field added there is audited, versioned and
# exported without more code.
AUDITED_FIELDS = tuple(ScheduleIn.model_fields)


def schedule_snapshot(schedule: Schedule) -> dict[str, Any]:
    return {name: getattr(schedule, name) for name in AUDITED_FIELDS}


def schedule_version(schedule: Schedule) -> str:
    """A digest of what a user may change in the schedule (not the tick's bookkeeping): it
    changes when someone changes the schedule, as an HTTP ETag must."""
    fields = json.dumps([schedule.id, schedule_snapshot(schedule)], sort_keys=True, default=str)
    return hashlib.sha256(fields.encode()).hexdigest()[:32]


def changed_fields(
    before: dict[str, Any], after: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only what changed, so the audit page shows the difference rather than two copies."""
    names = [name for name in after if before.get(name) != after[name]]
    return {name: before.get(name) for name in names}, {name: after[name] for name in names}


def audit_row(
    actor: Actor,
    action: str,
    schedule: Schedule | dict[str, Any],
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An audit_events row as a dict, for bulk inserts and single ones alike."""
    get = schedule.get if isinstance(schedule, dict) else lambda name: getattr(schedule, name)
    return {
        "tenant_id": get("tenant_id"),
        "actor_id": actor.user_id,
        "actor_label": actor.label,
        "action": action,
        "object_type": "schedule",
        "object_id": get("id"),
        "object_label": get("name"),
        "before": before,
        "after": after,
        "created_at": utcnow(),
    }


def record(session: Session, row: dict[str, Any]) -> None:
    session.add(AuditEvent(**row))


def record_event(
    session: Session,
    actor: Actor,
    action: str,
    subject: tuple[str, int | None, str | None],
    *,
    tenant_id: int | None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> None:
    """An audit event about anything but a schedule (a tenant, a user, a run, a token), in the
    caller's transaction. `subject`: its type, id and label; `tenant_id` None: installation-wide
    (the operator's audit)."""
    object_type, object_id, object_label = subject
    record(
        session,
        {
            "tenant_id": tenant_id,
            "actor_id": actor.user_id,
            "actor_label": actor.label,
            "action": action,
            "object_type": object_type,
            "object_id": object_id,
            "object_label": object_label,
            "before": before,
            "after": after,
            "created_at": at or utcnow(),
        },
    )


def audit_page(
    session: Session, tenant_id: int, size: int, before: int | None = None
) -> list[tuple[AuditEvent, str | None]]:
    """A page of the tenant's events, the `size` newest (below the id `before`), each with the
    current job of its schedule while that is still the tenant's (None otherwise): it names the
    parameters of an event that changed only the arguments, joined in the same statement."""
    same_schedule = and_(
        AuditEvent.object_type == "schedule",
        Schedule.id == AuditEvent.object_id,
        Schedule.tenant_id == AuditEvent.tenant_id,
    )
    query = scope.audit_events(tenant_id)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    statement = (
        query.add_columns(Schedule.job)
        .outerjoin(Schedule, same_schedule)
        .order_by(AuditEvent.id.desc())
        .limit(size)
    )
    return [(event, job) for event, job in session.execute(statement)]
