"""The audit log: who did what and when, with the changed fields before and after."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from flask import Blueprint
from flask_login import login_required
from werkzeug.wrappers import Response

from webapp.catalog import UnknownJobError
from webapp.catalog.current import current_catalog
from webapp.extensions import db
from webapp.models import AuditEvent
from webapp.services.audit import audit_page
from webapp.web import tenancy
from webapp.web.common import page_or_partial
from webapp.web.formatting import describe_cron, id_url, pretty_value
from webapp.web.forms import FIELD_LABELS, MISFIRE_CHOICES, OVERLAP_CHOICES
from webapp.web.params import id_arg

bp = Blueprint("audit", __name__)
bp.before_request(login_required(lambda: None))

PAGE_SIZE = 50


@bp.get("/audit")
def index() -> Response:
    """The tenant's audit events, newest first, keyset-paginated by id."""
    before = id_arg("before")
    tenant = tenancy.current_tenant()
    rows = audit_page(db.session(), tenant.id, PAGE_SIZE + 1, before)
    next_before = rows[PAGE_SIZE - 1][0].id if len(rows) > PAGE_SIZE else None
    rows = rows[:PAGE_SIZE]
    return page_or_partial(
        "audit/index.html",
        "audit/_rows.html" if before is not None else "audit/_log.html",
        events=[event for event, _ in rows],
        audit_jobs={event.object_id: job for event, job in rows if job is not None},
        next_before=next_before,
        tenant=tenant,
    )


# Fields of audit events that are not fields of the form (run now, resume, backfill).
EVENT_LABELS = {
    "run_id": "Run",
    "at": "Run at",
    "catch_up": "Missed fire times",
    "from": "Backfill from",
    "to": "Backfill to",
    "queued": "Runs queued",
    "skipped": "Skipped (already had a run)",
}


@dataclass(frozen=True)
class FieldValue:
    """A field's value as the form shows it (templates/audit/_rows.html): `kind` "text", or
    "cron" (`detail`: its description), "run" (`text` its id, `detail` its page's URL) or "time"
    (`detail`: the time)."""

    text: str
    kind: Literal["text", "cron", "run", "time"] = "text"
    detail: Any = None


@dataclass(frozen=True)
class ChangeRow:
    """One line of an event's changes: a field's label and its values as the form shows them;
    None where the event has no value on that side (nothing before a creation)."""

    label: str
    hint: str  # "parameter" for a job parameter, else ""
    before: FieldValue | None
    after: FieldValue | None


@bp.app_template_global()
def audit_changes(event: AuditEvent, job: str | None) -> list[ChangeRow]:
    """The changes of an audit event, one row per field, in the form's order and words."""
    before: dict[str, Any] = event.before or {}
    after: dict[str, Any] = event.after or {}
    names = [*before, *(name for name in after if name not in before)]
    # PostgreSQL's JSONB keeps keys sorted, SQLite as written: order them as the form does.
    order = [*FIELD_LABELS, *EVENT_LABELS]
    names.sort(key=lambda name: order.index(name) if name in order else len(order))
    rows = []
    for name in names:
        if name == "args":
            job = after.get("job") or before.get("job") or job
            rows += parameter_rows(job, before.get("args"), after.get("args"), "args" in before)
            continue
        label = FIELD_LABELS.get(name) or EVENT_LABELS.get(name) or name.replace("_", " ")
        rows.append(
            ChangeRow(
                label[0].upper() + label[1:],
                "",
                field_value(name, before[name]) if name in before else None,
                field_value(name, after[name]) if name in after else None,
            )
        )
    return rows


# What an empty optional field means, in the form's words (not JSON's `null` and `[]`).
EMPTY_FIELDS = {
    "notify_emails": "none: the tenant's default recipients",
    "notify_webhook_url": "none: the tenant's default webhook",
    "pause_after_failures": "never",
    "jitter_seconds": "the tenant's default",
}


def field_value(name: str, value: Any) -> FieldValue:
    """A schedule field's value as the form shows it: choices by their titles, the job by
    its title, the cron expression with its description, an empty field by what it means."""
    text: Any = value
    if value is None or value == []:
        text = EMPTY_FIELDS.get(name, "none")
    elif name == "active":
        text = "Active" if value else "Paused"
    elif name == "misfire_policy":
        text = MISFIRE_CHOICES.get(value, value)
    elif name == "overlap_policy":
        text = OVERLAP_CHOICES.get(value, value)
    elif name == "catch_up":
        text = "caught up" if value else "skipped"
    elif name == "job":
        text = job_label(value)
    elif name == "cron" and isinstance(value, str):
        return FieldValue(value, "cron", describe_cron(value))
    elif name == "run_id" and isinstance(value, int):
        return FieldValue(str(value), "run", id_url("runs.detail", run_id=value))
    elif name in ("at", "from", "to") and isinstance(value, str):
        try:
            return FieldValue(value, "time", datetime.fromisoformat(value))
        except ValueError:
            pass
    return FieldValue(pretty_value(text))


def job_label(name: Any) -> str:
    catalog = current_catalog()
    if isinstance(name, str) and name in catalog:
        return f"{catalog.get(name).title} ({name})"
    return pretty_value(name)


def parameter_rows(job: str | None, before: Any, after: Any, had_before: bool) -> list[ChangeRow]:
    """One row per job parameter that changed, labelled with the parameter's title."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    titles = parameter_titles(job)
    order = list(titles)
    names = [*old, *(n for n in new if n not in old)]
    names.sort(key=lambda name: order.index(name) if name in order else len(order))
    rows = []
    for name in names:
        if name in old and name in new and old[name] == new[name]:
            continue
        rows.append(
            ChangeRow(
                titles.get(name, name),
                "parameter",
                parameter_value(old[name]) if had_before and name in old else None,
                parameter_value(new[name]) if name in new else None,
            )
        )
    return rows


def parameter_titles(job: str | None) -> dict[str, str]:
    try:
        spec = current_catalog().get(job or "")
    except UnknownJobError:
        return {}
    return {param.name: param.title for param in spec.form_fields()}


def parameter_value(value: Any) -> FieldValue:
    """A parameter as its form field shows it: a checkbox as Yes or No."""
    if isinstance(value, bool):
        return FieldValue("Yes" if value else "No")
    return FieldValue("(default)" if value is None else pretty_value(value))
