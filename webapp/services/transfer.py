"""Schedules as data: import a JSON list all-or-nothing, export the same JSON.

Import is bulk: every item is validated first, then the whole file is written with a few
set-based statements in one transaction, whatever its length. A file may also be an object
`{"calendars": [...], "schedules": [...]}`: the tenant's business calendars (as
`calendar_files` reads them) written first in the same transaction, so that its schedules may
name them; `export_schedules(with_calendars=True)` writes that form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import insert, update

from webapp.database import load_user_json, retry_lost_race, write_transaction
from webapp.extensions import db
from webapp.models import AuditEvent, Schedule, Tenant
from webapp.scheduler.fire_ahead import withdraw_fires_ahead
from webapp.scheduler.wakeup import notify_workers
from webapp.services import scope
from webapp.services.audit import (
    AUDITED_FIELDS,
    Actor,
    audit_row,
    changed_fields,
    schedule_snapshot,
)
from webapp.services.calendar_files import (
    CalendarImport,
    calendar_documents,
    check_items,
    write_calendars,
)
from webapp.services.calendar_schema import CalendarIn, CalendarProblems
from webapp.services.schedules import (
    NewSchedule,
    add_schedules,
    calendar_ids,
    lock_tenant,
    restart_cadence,
    schedule_warnings,
    shared_names,
    stored_values,
    tenant_limits,
    tenant_rules,
)
from webapp.services.schema import ImportItem, ScheduleError, format_error

# The import format: a schedule's fields as the audit trail records them.
EXPORTED_FIELDS = AUDITED_FIELDS


class ImportProblems(ValueError):
    """Every problem of an import file, one line each; nothing was written."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class ImportResult:
    created: int
    updated: int
    unchanged: int
    # What was imported but may not be meant (schedules.schedule_warnings), a line each.
    warnings: list[str] = field(default_factory=list)
    # The calendars of a file that has them (None: a list of schedules alone).
    calendars: CalendarImport | None = None


FILE_KEYS = {"calendars", "schedules"}


def parse_items(text: str) -> tuple[list[Any], list[CalendarIn] | None]:
    """The file's schedule items, and its calendars checked (None when it has none)."""
    try:
        document = load_user_json(text)
    except ValueError as error:
        raise ImportProblems([f"malformed JSON: {error}"]) from None
    calendars = None
    if isinstance(document, dict) and set(document) <= FILE_KEYS:
        try:
            calendars = check_items(document.get("calendars", []))
        except CalendarProblems as problems:
            lines = [format_error(f, m) for f, m in problems.errors.items()]
            raise ImportProblems([f"calendars: {line}" for line in lines]) from None
        document = document.get("schedules", [])
    if not isinstance(document, list):
        raise ImportProblems(
            [
                'the file must hold a JSON list of schedule objects, or an object with "calendars" '
                'and "schedules" lists'
            ]
        )
    return document, calendars


@retry_lost_race
def import_schedules(tenant: Tenant, text: str, actor: Actor, now: datetime) -> ImportResult:
    """Creates or updates (by key) every schedule of the file, or nothing at all."""
    items, calendars = parse_items(text)
    limits = tenant_limits(tenant)
    rules = tenant_rules(limits, now, tenant.id, [c.key for c in calendars or ()])
    problems: list[str] = []
    cleaned: list[ImportItem] = []
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        key = item.get("key") if isinstance(item, dict) else None
        label = f"item {index} (key {key!r})" if isinstance(key, str) else f"item {index}"
        if isinstance(item, dict):  # an item without a zone is in the tenant's
            item = {"time_zone": tenant.time_zone, **item}
        try:
            cleaned.append(ImportItem.check(item, rules))
            item_problems = []
        except ScheduleError as error:
            item_problems = [format_error(name, message) for name, message in error.errors.items()]
        if isinstance(key, str) and key in first_index:
            item_problems.append(f"duplicate key: item {first_index[key]} has it too")
        elif isinstance(key, str):
            first_index[key] = index
        problems += [f"{label}: {problem}" for problem in item_problems]
    if problems:
        raise ImportProblems(problems)

    with write_transaction(db.session) as session:
        lock_tenant(session, tenant)
        calendars_written = None
        if calendars is not None:
            calendars_written = write_calendars(session, tenant, calendars, actor, now)
        existing = {
            schedule.key: schedule for schedule in session.scalars(scope.schedules(tenant.id))
        }
        new = [NewSchedule(asked, tenant.id) for asked in cleaned if asked.key not in existing]
        calendars_now = calendar_ids(tenant.id)
        changes, audits = [], []
        for asked in cleaned:
            schedule = existing.get(asked.key)
            if schedule is None:
                continue
            values = asked.model_dump()
            before = schedule_snapshot(schedule)
            old, changed = changed_fields(before, values)
            if not changed:
                continue
            try:  # a calendar deleted since the check
                stored = stored_values(asked, calendars_now)
            except ScheduleError as error:
                raise ImportProblems([f"key {asked.key!r}: {error}"]) from None
            row = {**stored, "id": schedule.id, "updated_at": now}
            row.update(restart_cadence(schedule, asked, now, stored["calendar_id"]))
            changes.append(row)
            audits.append(
                audit_row(actor, "schedule.updated", {**row, "tenant_id": tenant.id}, old, changed)
            )
        try:
            add_schedules(session, new, actor, now, quota=(tenant, limits))
        except ScheduleError as error:
            raise ImportProblems(list(error.errors.values())) from None
        if changes:
            # Runs queued ahead of their fire time hold the schedules as they were.
            withdraw_fires_ahead(session, [row["id"] for row in changes], now)
            # Bulk UPDATE by primary key: SQLAlchemy groups the rows by the columns they set.
            session.execute(update(Schedule), changes)
            session.execute(insert(AuditEvent), audits)
            notify_workers(session)
    shared = shared_names(tenant)
    warnings = [
        f"key {asked.key!r}: {format_error(name, warning)}"
        for asked in cleaned
        for name, warning in schedule_warnings(
            tenant, asked.name, asked.time_zone, asked.key, shared
        ).items()
    ]
    return ImportResult(
        created=len(new),
        updated=len(changes),
        unchanged=len(cleaned) - len(new) - len(changes),
        warnings=warnings,
        calendars=calendars_written,
    )


def export_schedules(tenant: Tenant, with_calendars: bool = False) -> str:
    """The tenant's schedules as the import format, sorted by key: export then import is a no-op.
    `with_calendars`: the object form, with the tenant's calendars."""
    schedules = db.session.scalars(scope.schedules(tenant.id).order_by(Schedule.key))
    items = [{name: getattr(s, name) for name in EXPORTED_FIELDS} for s in schedules]
    document: object = items
    if with_calendars:
        document = {"calendars": calendar_documents(tenant), "schedules": items}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
