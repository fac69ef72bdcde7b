"""The schedule form's helpers: what the form shows (its context, the live preview of its
cron, phrase or builder) and what a post does before and after a save. The views are in
`schedules`."""

from __future__ import annotations

from datetime import date
from typing import Any, cast

from flask import request, url_for
from werkzeug.wrappers import Response

from webapp import cron
from webapp.catalog.current import current_catalog
from webapp.config import settings
from webapp.cron.builder import MONTH_ON, MONTHS, NTH_WEEKDAY, REPEATS, WEEKDAYS
from webapp.database import utcnow
from webapp.models import CALENDAR_POLICIES, CalendarPolicy, Schedule
from webapp.services.calendar_marks import calendar_rules
from webapp.services.calendars import tenant_calendars
from webapp.services.schedules import (
    ScheduleError,
    preview_cron,
    schedule_warnings,
    tenant_limits,
)
from webapp.web import tenancy
from webapp.web.common import htmx_redirect, page_or_partial
from webapp.web.forms import (
    CALENDAR_POLICY_CHOICES,
    FIELD_LABELS,
    MISFIRE_CHOICES,
    OVERLAP_CHOICES,
    ScheduleForm,
    job_spec,
    optional_number,
)
from webapp.web.time_zones import time_zone_names


def form_context(form: ScheduleForm, schedule: Schedule | None) -> dict[str, Any]:
    catalog = current_catalog()
    spec = job_spec(catalog, form.job)
    return {
        "form": form,
        "schedule": schedule,
        "jobs": catalog.jobs(scope="tenant"),
        "params": spec.form_fields(settings().job_settings()) if spec else [],
        "misfire_choices": MISFIRE_CHOICES,
        "overlap_choices": OVERLAP_CHOICES,
        "calendars": tenant_calendars(tenancy.current_tenant().id),
        "calendar_policy_choices": CALENDAR_POLICY_CHOICES,
        "time_zones": time_zone_names(),
        "tenant_jitter": tenancy.current_tenant().jitter_seconds,
        "preview": cron_preview(
            form.cron,
            form.time_zone,
            jitter=form.jitter_seconds,
            in_form=True,
            phrase=form.phrase,
            calendar=form.calendar,
            policy=form.calendar_policy,
        ),
        **builder_choices(),
        "warnings": schedule_warnings(
            tenancy.current_tenant(), form.name, form.time_zone, schedule.key if schedule else None
        ),
    }


def builder_choices() -> dict[str, Any]:
    """The builder's selects, for its template (schedules/_builder_fields.html)."""
    return {
        "repeats": REPEATS,
        "month_on": MONTH_ON,
        "nth_weekday": NTH_WEEKDAY,
        "weekdays": WEEKDAYS,
        "months": MONTHS,
    }


def cron_preview(
    expression: str,
    time_zone: str,
    count: int = 5,
    start: date | None = None,
    jitter: str | int | None = None,
    in_form: bool = False,
    phrase: str = "",
    calendar: str = "",
    policy: str = "skip",
    calendar_id: int | None = None,
) -> dict[str, Any]:
    """The preview's context; `jitter` as typed in the form (blank: the tenant's default);
    `in_form`: with the refusal a save would meet for firing more often than the tenant allows;
    a `phrase` ("Describe it"), or a cron field that holds one, previews its cron (`cron`);
    `calendar` (a calendar's key; blank: none), or a saved schedule's `calendar_id`, marks the
    fires it skips or moves by `policy`."""
    typed = phrase.strip() or expression.strip()
    if not typed:
        return {"empty": True}
    try:
        expression = cron.parse_phrase(typed) if phrase.strip() else cron.cron_from_input(typed)
    except cron.PhraseError as error:
        return {"errors": {"phrase" if phrase.strip() else "cron": str(error)}}
    from_phrase = expression if expression != typed else None
    asked = optional_number(jitter) if isinstance(jitter, str) else jitter
    if isinstance(asked, str):
        return {
            "errors": {
                "jitter_seconds": f"{FIELD_LABELS['jitter_seconds']}: must be a whole number"
            }
        }
    tenant = tenancy.current_tenant()
    if policy not in CALENDAR_POLICIES:
        return {"errors": {"calendar_policy": f"{policy!r} is not a calendar policy"}}
    rules = calendar_rules(tenant.id, key=calendar.strip() or None, calendar_id=calendar_id)
    if calendar.strip() and rules is None:
        return {"errors": {"calendar": f"the tenant has no calendar {calendar.strip()!r}"}}
    try:
        result = preview_cron(
            expression,
            time_zone,
            utcnow(),
            count,
            start,
            jitter=asked,
            tenant_jitter=tenant.jitter_seconds,
            min_interval=tenant_limits(tenant).min_interval if in_form else None,
            calendar=rules,
            policy=cast(CalendarPolicy, policy),
        )
    except ScheduleError as error:
        return {"errors": error.errors, "cron": from_phrase}
    return {"result": result, "cron": from_phrase}


def saved(schedule: Schedule, verb: str) -> Response:
    """To the schedule's page, with its key and what its author may not have meant."""
    warnings = schedule_warnings(
        tenancy.current_tenant(), schedule.name, schedule.time_zone, schedule.key
    )
    message = f"Schedule “{schedule.name}” {verb}."
    if "name" in warnings:
        message += f" Its key is {schedule.key}: {warnings['name']}."
    if "time_zone" in warnings:
        message += f" Note: {warnings['time_zone']}."
    return htmx_redirect(message, url_for("schedules.detail", schedule_id=schedule.id))


def save_failed(form: ScheduleForm, schedule: Schedule | None, error: ScheduleError) -> Response:
    form.errors = error.errors
    return page_or_partial(
        "schedules/form.html", "schedules/_form.html", 422, **form_context(form, schedule)
    )


def form_ready(form: ScheduleForm, schedule: Schedule | None) -> Response | None:
    """Before a save: the cron the form means (the builder's, a phrase's, the cron field's), or
    ScheduleError. "Show cron" and "Update cron" (the round trips without JavaScript) answer
    the form again, with that cron and its preview, and save nothing."""
    button = "phrase" if "show_cron" in request.form else ""
    button = "builder" if "update_cron" in request.form else button
    errors = form.resolve_cron(button)
    if errors:
        raise ScheduleError(errors)
    if not button:
        return None
    return page_or_partial(
        "schedules/form.html", "schedules/_form.html", **form_context(form, schedule)
    )


def builder_preview(
    form: ScheduleForm, start: date | None, jitter: str, calendar: str = "", policy: str = "skip"
) -> dict[str, Any]:
    """The live preview of the builder's fields (Custom: of the cron field); each error says
    which field it is about. `calendar`: cron_preview's `calendar` and `policy`."""
    try:
        built = form.built_cron()
    except cron.BuilderError as error:
        return {
            "errors": {name: f"{FIELD_LABELS[name]}: {text}" for name, text in error.errors.items()}
        }
    result = cron_preview(
        form.cron if built is None else built,
        form.time_zone,
        start=start,
        jitter=jitter,
        in_form=True,
        calendar=calendar,
        policy=policy,
    )
    if built is None:
        return result
    form.cron = built
    return result | {"cron": built}
