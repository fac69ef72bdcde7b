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
from webapp.models import MISFIRE_POLICIES, OVERLAP_POLICIES, Schedule, Tenant

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
    phrase: str = ""  # "Describe it": plain English for the cron field
    cron_as_shown: str = ""  # the cron field as the form showed it, to tell a hand edit
    args: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def blank(cls, tenant: Tenant, catalog: Catalog) -> ScheduleForm:
        jobs = catalog.jobs(scope="tenant")
        job = jobs[0].name if jobs else ""
        form = cls(job=job, cron="0 * * * *", time_zone=tenant.time_zone)
        form.args = default_args(catalog, job)
        return form

    @classmethod
    def for_schedule(cls, schedule: Schedule) -> ScheduleForm:
        args = {}
        for key, value in (schedule.args or {}).items():
            if isinstance(value, bool):
                args[key] = "on" if value else ""
            else:
                args[key] = "" if value is None else str(value)
        return cls(
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
            args=args,
        )

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
            phrase=data.get("phrase", ""),
            cron_as_shown=data.get("cron_as_shown", ""),
            args={
                key.removeprefix("args."): value
                for key, value in data.items()
                if key.startswith("args.")
            },
        )

    def resolve_cron(self, phrase_wins: bool = False) -> dict[str, str]:
        """Puts in `cron` the expression the form means, or returns the errors by field.

        A "Describe it" phrase gives the cron unless the cron field was edited by hand to
        something else (then the two disagree: an error, unless `phrase_wins`, as when "Show
        cron" is pressed); without one, the cron field is read as cron or as a phrase.
        """
        phrase = self.phrase.strip()
        try:
            if not phrase:
                self.cron = cron.cron_from_input(self.cron.strip())
                return {}
            described = cron.parse_phrase(phrase)
        except cron.PhraseError as error:
            return {"phrase" if phrase else "cron": str(error)}
        typed = " ".join(self.cron.split())
        if phrase_wins or typed in ("", described, " ".join(self.cron_as_shown.split())):
            self.cron = described
            return {}
        return {
            "phrase": f"it says {described} but the cron expression is {typed}: press “Show "
            "cron” to use the description, or empty this box to keep the expression"
        }

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
        }


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
