"""Schedules as data: import a JSON list all-or-nothing, export the same JSON.

Import is bulk: every item is validated first, then the whole file is written with a few
set-based statements in one transaction, whatever its length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update

from webapp.catalog.current import current_catalog
from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import AuditEvent, Schedule, Tenant
from webapp.services.audit import Actor, audit_row, changed_fields
from webapp.services.schedules import (
    ScheduleInput,
    clean,
    format_error,
    lock_tenant,
    tenant_limits,
)

REQUIRED_FIELDS = ("key", "name", "job", "cron")
OPTIONAL_FIELDS = ("args", "time_zone", "active", "misfire_policy", "overlap_policy")
EXPORTED_FIELDS = (*REQUIRED_FIELDS[:3], "args", "cron", *OPTIONAL_FIELDS[1:])


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


def parse_items(text: str) -> list[Any]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ImportProblems([f"malformed JSON: {error}"]) from None
    except RecursionError:
        raise ImportProblems(["malformed JSON: nested too deeply"]) from None
    if not isinstance(document, list):
        raise ImportProblems(["the file must hold a JSON list of schedule objects"])
    return document


def item_label(index: int, item: Any) -> str:
    key = item.get("key") if isinstance(item, dict) else None
    return f"item {index} (key {key!r})" if isinstance(key, str) else f"item {index}"


def read_item(item: Any, tenant: Tenant) -> tuple[ScheduleInput | None, list[str]]:
    if not isinstance(item, dict):
        return None, ["must be a JSON object"]
    problems = [f"{name}: field required" for name in REQUIRED_FIELDS if name not in item]
    problems += [
        f"{name}: unknown field" for name in item if name not in REQUIRED_FIELDS + OPTIONAL_FIELDS
    ]
    if problems:
        return None, problems
    return ScheduleInput(
        key=item["key"],
        name=item["name"],
        job=item["job"],
        cron=item["cron"],
        args=item.get("args", {}),
        time_zone=item.get("time_zone", tenant.time_zone),
        active=item.get("active", True),
        misfire_policy=item.get("misfire_policy", "fire_once"),
        overlap_policy=item.get("overlap_policy", "allow"),
    ), []


def import_schedules(tenant: Tenant, text: str, actor: Actor, now: datetime) -> ImportResult:
    """Creates or updates (by key) every schedule of the file, or nothing at all."""
    items = parse_items(text)
    catalog = current_catalog()
    limits = tenant_limits(tenant)
    problems: list[str] = []
    cleaned: list[dict[str, Any]] = []
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        label = item_label(index, item)
        data, item_problems = read_item(item, tenant)
        if data is not None:
            values, errors = clean(data, limits, catalog, now)
            item_problems = [format_error(name, message) for name, message in errors.items()]
            if isinstance(data.key, str) and data.key in first_index:
                item_problems.append(f"duplicate key: item {first_index[data.key]} has it too")
            elif isinstance(data.key, str):
                first_index[data.key] = index
            cleaned.append(values)
        problems += [f"{label}: {problem}" for problem in item_problems]
    if problems:
        raise ImportProblems(problems)

    with write_transaction(db.session) as session:
        lock_tenant(session, tenant)
        existing = {
            schedule.key: schedule
            for schedule in session.scalars(select(Schedule).where(Schedule.tenant_id == tenant.id))
        }
        new = [values for values in cleaned if values["key"] not in existing]
        if limits.max_schedules is not None and len(existing) + len(new) > limits.max_schedules:
            raise ImportProblems(
                [
                    f"tenant '{tenant.slug}' may have at most {limits.max_schedules} schedules: "
                    f"it has {len(existing)} and the file adds {len(new)}"
                ]
            )
        changes, audits = [], []
        for values in cleaned:
            schedule = existing.get(values["key"])
            if schedule is None:
                continue
            before = {name: getattr(schedule, name) for name in EXPORTED_FIELDS}
            old, changed = changed_fields(before, {n: values[n] for n in EXPORTED_FIELDS})
            if not changed:
                continue
            row = {name: values[name] for name in EXPORTED_FIELDS}
            row["id"] = schedule.id
            row["updated_at"] = now
            reactivated = values["active"] and not schedule.active
            if reactivated or "cron" in changed or "time_zone" in changed:
                row["next_run_at"] = values["next_run_at"]  # re-activated: missed fires skipped
            if reactivated:
                row["inactive_reason"] = None
            changes.append(row)
            audits.append(
                audit_row(actor, "schedule.updated", {**row, "tenant_id": tenant.id}, old, changed)
            )
        if new:
            rows = [
                {
                    **values,
                    "tenant_id": tenant.id,
                    "scope": "tenant",
                    "created_by": actor.user_id,
                    "created_at": now,
                    "updated_at": now,
                }
                for values in new
            ]
            ids = session.scalars(
                insert(Schedule).returning(Schedule.id, sort_by_parameter_order=True), rows
            ).all()
            for schedule_id, row in zip(ids, rows, strict=True):
                snapshot = {name: row[name] for name in EXPORTED_FIELDS}
                audits.append(
                    audit_row(actor, "schedule.created", {**row, "id": schedule_id}, after=snapshot)
                )
        if changes:
            # Bulk UPDATE by primary key: SQLAlchemy groups the rows by the columns they set.
            session.execute(update(Schedule), changes)
        if audits:
            session.execute(insert(AuditEvent), audits)
    return ImportResult(
        created=len(new), updated=len(changes), unchanged=len(cleaned) - len(new) - len(changes)
    )


def export_schedules(tenant: Tenant) -> str:
    """The tenant's schedules as the import format, sorted by key: export then import is a no-op."""
    schedules = db.session.scalars(
        select(Schedule).where(Schedule.tenant_id == tenant.id).order_by(Schedule.key)
    )
    items = [{name: getattr(s, name) for name in EXPORTED_FIELDS} for s in schedules]
    return json.dumps(items, indent=2, ensure_ascii=False) + "\n"
