"""The schedule form: raw values as typed (kept on errors) and their conversion for the service.

The job's parameter fields are generated from the catalog (`JobSpec.form_fields()`); each is
posted as `args.<name>`, the same path that the service's errors use, so an error lands next to
its field. Validation itself is the schedule schema's (services/schema.py ScheduleIn): this module
only turns the posted strings into the plain data the schema takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from werkzeug.datastructures import MultiDict

from webapp import cron
from webapp.catalog import Catalog, FormField, JobSpec, UnknownJobError
from webapp.models import (
    CALENDAR_POLICIES,
    MISFIRE_POLICIES,
    OVERLAP_POLICIES,
    Schedule,
    Tenant,
)

# The schedule form's labels by field name; the audit log names changed fields with them too.
FIELD_LABELS = {
    "name": "Name",
    "key": "Key",
    "job": "Job",
    "args": "Job parameters",
    "phrase": "Describe it",
    "cron": "Cron expression",
    "time_zone": "Time zone",
    "misfire_policy": "After downtime (missed fire times)",
    "overlap_policy": "When the previous run is still going",
    "active": "Active",
    "notify_emails": "Notify emails",
    "notify_webhook_url": "Notify webhook URL",
    "pause_after_failures": "Pause after N failed runs",
    "jitter_seconds": "Jitter (seconds)",
    "calendar": "Calendar",
    "calendar_policy": "When the calendar is closed",
    # The schedule builder's fields (webapp/cron/builder.py): they write the cron expression.
    "repeat": "Repeat",
    "repeat_minutes": "Every (minutes)",
    "repeat_hours": "Every (hours)",
    "repeat_minute": "At minute",
    "repeat_days": "On these days",
    "repeat_on": "On",
    "repeat_day": "Day of the month",
    "repeat_weekday": "Day of the week",
    "repeat_month": "Month",
    "repeat_times": "At (times of day)",
}
# Notify emails are typed one per line or separated by commas (or semicolons, as mail clients do).
EMAIL_SEPARATORS = re.compile(r"[,;\n]")
MISFIRE_CHOICES = {
    "fire_once": "Run once for all missed times (default)",
    "fire_all": "Run once for every missed time",
    "skip": "Skip missed times",
}
OVERLAP_CHOICES = {
    "allow": "Allow overlapping runs (default)",
    "skip": "Skip a run while the previous one is unfinished",
}
CALENDAR_POLICY_CHOICES = {
    "skip": "Skip the run",
    "next_business_day": "Run on the next business day",
    "previous_business_day": "Run on the previous business day",
}
assert set(CALENDAR_POLICY_CHOICES) == set(CALENDAR_POLICIES)
assert set(MISFIRE_CHOICES) == set(MISFIRE_POLICIES)
assert set(OVERLAP_CHOICES) == set(OVERLAP_POLICIES)
# Form-level errors: fields without an input of their own.
GENERAL_ERRORS = ("quota", "key", "args", "active")


def arg_name(param: FormField) -> str:
    return f"args.{param.name}"


def shown_default(param: FormField) -> str:
    if param.default is None:
        return ""
    if isinstance(param.default, bool):
        return "on" if param.default else ""
    return str(param.default)


@dataclass
class ScheduleForm:
    """What the form shows: values as strings (args too), and errors by field name."""

    name: str = ""
    job: str = ""
    cron: str = ""
    time_zone: str = "UTC"
    misfire_policy: str = "fire_once"
    overlap_policy: str = "allow"
    active: bool = True
    notify_emails: str = ""
    notify_webhook_url: str = ""
    pause_after_failures: str = ""
    jitter_seconds: str = ""  # blank: the tenant's default
    calendar: str = ""  # a calendar's key; blank: none
    calendar_policy: str = "skip"
    phrase: str = ""  # "Describe it": plain English for the cron field
    cron_as_shown: str = ""  # the cron field as the form showed it, to tell a hand edit
    builder: dict[str, str] = field(default_factory=dict)  # the builder's fields, as typed
    repeat_shown: str = ""  # which builder fields the form showed (cron.builder_shown)
    args: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def blank(cls, tenant: Tenant, catalog: Catalog) -> ScheduleForm:
        jobs = catalog.jobs(scope="tenant")
        job = jobs[0].name if jobs else ""
        form = cls(job=job, cron="0 * * * *", time_zone=tenant.time_zone)
        form.args = default_args(catalog, job)
        form.sync_builder()
        return form

    @classmethod
    def for_schedule(cls, schedule: Schedule) -> ScheduleForm:
        args = {}
        for key, value in (schedule.args or {}).items():
            if isinstance(value, bool):
                args[key] = "on" if value else ""
            else:
                args[key] = "" if value is None else str(value)
        form = cls(
            name=schedule.name,
            job=schedule.job,
            cron=schedule.cron,
            time_zone=schedule.time_zone,
            misfire_policy=schedule.misfire_policy,
            overlap_policy=schedule.overlap_policy,
            active=schedule.active,
            notify_emails=", ".join(schedule.notify_emails or ()),
            notify_webhook_url=schedule.notify_webhook_url or "",
            pause_after_failures=str(schedule.pause_after_failures or ""),
            jitter_seconds=optional_text(schedule.jitter_seconds),
            calendar=schedule.calendar or "",
            calendar_policy=schedule.calendar_policy,
            args=args,
        )
        form.sync_builder()  # opens in the builder's shape of its cron, or Custom
        return form

    @classmethod
    def from_post(cls, data: MultiDict[str, str]) -> ScheduleForm:
        return cls(
            name=data.get("name", ""),
            job=data.get("job", ""),
            cron=data.get("cron", ""),
            time_zone=data.get("time_zone", "").strip(),
            misfire_policy=data.get("misfire_policy", "fire_once"),
            overlap_policy=data.get("overlap_policy", "allow"),
            active=data.get("active") == "on",
            notify_emails=data.get("notify_emails", ""),
            notify_webhook_url=data.get("notify_webhook_url", ""),
            pause_after_failures=data.get("pause_after_failures", ""),
            jitter_seconds=data.get("jitter_seconds", ""),
            calendar=data.get("calendar", ""),
            calendar_policy=data.get("calendar_policy", "skip"),
            phrase=data.get("phrase", ""),
            cron_as_shown=data.get("cron_as_shown", ""),
            builder=builder_fields(data),
            repeat_shown=data.get("repeat_shown", ""),
            args={
                key.removeprefix("args."): value
                for key, value in data.items()
                if key.startswith("args.")
            },
        )

    def resolve_cron(self, button: str = "") -> dict[str, str]:
        """Puts in `cron` the expression the form means, or returns the errors by field.

        The builder (Repeat), "Describe it" and the cron field were shown saying the same
        schedule (`cron_as_shown`): the one changed since rules, and the others follow it. Two
        changed to different schedules are refused, unless a button says which rules (`button`:
        "phrase" for "Show cron", "builder" for "Update cron"). Repeat set to another shape
        without its fields shown (no JavaScript) writes its cron with their defaults and shows
        them, saving nothing (an error beside Repeat). Custom: the builder says nothing.
        """
        shown = " ".join(self.cron_as_shown.split())
        typed = " ".join(self.cron.split())
        says: dict[str, str] = {}
        try:
            built = self.built_cron()
            phrase = self.phrase.strip()
            described = cron.parse_phrase(phrase) if phrase else None
        except cron.BuilderError as error:
            return error.errors
        except cron.PhraseError as error:
            return {"phrase": str(error)}
        if built is not None and (self.new_shape() or button == "builder" or built != shown):
            says["builder"] = built
        if described is not None and (button == "phrase" or described != shown):
            says["phrase"] = described
        if button not in says and (typed != shown or not says):
            try:
                says["cron"] = cron.cron_from_input(typed)
            except cron.PhraseError as error:
                return {"cron": str(error)}
        if button in says:
            says = {button: says[button]}
        problems = disagreements(says, typed)
        if problems:
            return problems
        self.cron = next(iter(says.values()))
        if described is not None and described != self.cron:
            self.phrase = ""  # it no longer says what the schedule does
        fresh = built is not None and self.new_shape() and not button
        business = self.cron == built and self.last_business_day()
        if business:  # the shape is a calendar's policy as well as cron
            self.calendar_policy = "previous_business_day"
        self.sync_builder()
        if business and not self.calendar.strip():
            return {"calendar": "the last business day counts the days of a calendar: choose one"}
        if fresh:
            return {"repeat": "check this repeat's details below, then save (nothing is saved yet)"}
        return {}

    def new_shape(self) -> bool:
        """Whether Repeat (or a monthly On) was set to a shape whose fields the form did not
        show (Custom has none to show, but the others' go)."""
        return bool(self.builder) and cron.builder_shown(self.builder) != self.repeat_shown

    def built_cron(self) -> str | None:
        """The builder's cron expression, None for Custom (or no builder); BuilderError. A
        shape whose fields were not shown reads their defaults."""
        if self.builder.get("repeat", "custom") == "custom":
            return None
        fields = cron.builder_defaults(self.builder) if self.new_shape() else self.builder
        return cron.read_builder(fields).cron()

    def builder_fields(self) -> dict[str, str]:
        """The builder's fields as the form shows them (defaults for those it has not)."""
        return cron.builder_defaults(self.builder)

    def builder_shown(self) -> str:
        """Which builder fields the form shows now (posted back as `repeat_shown`)."""
        return cron.builder_shown(self.builder_fields())

    def last_business_day(self) -> bool:
        """Whether the builder says "monthly, on the last business day"."""
        fields = self.builder
        return (
            fields.get("repeat") == "monthly" and fields.get("repeat_on") == cron.LAST_BUSINESS_DAY
        )

    def sync_builder(self) -> None:
        """The builder opens the shape of the cron expression (Custom when it has none); `L`
        with a calendar moved to the previous business day is the last business day."""
        self.builder = cron.shape_of(self.cron).fields()
        last_day = self.builder["repeat"] == "monthly" and self.builder["repeat_on"] == "L"
        if last_day and self.calendar and self.calendar_policy == "previous_business_day":
            self.builder["repeat_on"] = cron.LAST_BUSINESS_DAY
        self.repeat_shown = cron.builder_shown(self.builder)

    def general_errors(self) -> list[str]:
        return [self.errors[name] for name in GENERAL_ERRORS if name in self.errors]

    def to_data(self, catalog: Catalog) -> dict[str, object]:
        """The posted schedule as the plain data that the service checks (ScheduleIn)."""
        spec = job_spec(catalog, self.job)
        return {
            "name": self.name,
            "job": self.job,
            "args": convert_args(spec, self.args) if spec else {},
            "cron": self.cron,
            "time_zone": self.time_zone,
            "active": self.active,
            "misfire_policy": self.misfire_policy,
            "overlap_policy": self.overlap_policy,
            "notify_emails": split_emails(self.notify_emails),
            "notify_webhook_url": self.notify_webhook_url.strip() or None,
            "pause_after_failures": parse_number(self.pause_after_failures, int)
            if self.pause_after_failures.strip()
            else None,
            "jitter_seconds": optional_number(self.jitter_seconds),
            "calendar": self.calendar.strip() or None,
            "calendar_policy": self.calendar_policy,
        }


def builder_fields(data: MultiDict[str, str]) -> dict[str, str]:
    """The builder's fields as posted; the days of the week, checkboxes, joined by commas (none
    checked is blank when the form showed them, else left out)."""
    fields = {name: data[name] for name in cron.BUILDER_FIELDS if name in data}
    days = data.getlist("repeat_days")
    if days or data.get("repeat_shown") == "weekly":
        fields["repeat_days"] = ",".join(days)
    return fields


def disagreements(says: dict[str, str], typed: str) -> dict[str, str]:
    """The errors of the builder, a phrase and the cron field changed to different schedules."""
    builder, phrase, typed_cron = says.get("builder"), says.get("phrase"), says.get("cron")
    errors = {}
    if builder and typed_cron and builder != typed_cron:
        errors["repeat"] = (
            f"the builder says {builder} but the cron expression is {typed}: press “Update "
            "cron” to use the builder, or choose Custom to keep the expression"
        )
    if phrase and typed_cron and phrase != typed_cron:
        errors["phrase"] = (
            f"it says {phrase} but the cron expression is {typed}: press “Show cron” to use "
            "the description, or empty this box to keep the expression"
        )
    elif phrase and builder and phrase != builder:
        errors["phrase"] = (
            f"it says {phrase} but the builder says {builder}: press “Show cron” to use the "
            "description, or empty this box to keep the builder's"
        )
    return errors


def optional_text(value: int | None) -> str:
    """A number as the form shows it; None (0 is a value of its own) as blank."""
    return "" if value is None else str(value)


def optional_number(text: str) -> int | str | None:
    """A whole-number field as the schema takes it: blank is None, anything else as typed
    unless it is a whole number (the schema then says it must be one)."""
    return parse_number(text, int) if text.strip() else None  # type: ignore[return-value]


def split_emails(text: str) -> list[str]:
    """The addresses of the Notify emails field; the schema checks each."""
    return [part.strip() for part in EMAIL_SEPARATORS.split(text) if part.strip()]


def job_spec(catalog: Catalog, name: str) -> JobSpec | None:
    try:
        spec = catalog.get(name)
    except UnknownJobError:
        return None
    return spec if spec.scope_problem("tenant") is None else None


def default_args(catalog: Catalog, job: str) -> dict[str, str]:
    spec = job_spec(catalog, job)
    if spec is None:
        return {}
    return {param.name: shown_default(param) for param in spec.form_fields()}


def convert_args(spec: JobSpec, raw: dict[str, str]) -> dict[str, Any]:
    """Typed arguments from the posted strings.

    An empty field is left out, so the parameter's default applies (or the job reports it
    missing); text that does not
    parse is passed on as is, so that the job's own validation explains what is wrong.
    """
    args: dict[str, Any] = {}
    for param in spec.form_fields():
        value = raw.get(param.name)
        if param.kind == "checkbox":
            args[param.name] = value == "on"
            continue
        if value is None or value.strip() == "":
            continue  # the default applies, or the job says the parameter is required
        if param.kind == "integer":
            args[param.name] = parse_number(value, int)
        elif param.kind == "number":
            args[param.name] = parse_number(value, float)
        else:
            args[param.name] = value
    return args


def parse_number(text: str, kind: type[int] | type[float]) -> int | float | str:
    try:
        return kind(text.strip())
    except ValueError:
        return text
