"""The schedule schema: what a form, an import item, the CLI or the API may ask for, checked once.

`ScheduleIn` checks a schedule's own fields (types, the key pattern, the name, the time zone, the
cron expression in that zone, the policies) and, through the validation context
(`ScheduleRules`), what depends on the installation: the job is in the catalog and of the
schedule's scope, its arguments fit the job's own parameters model, and the cron expression
respects the tenant's minimum interval. `check` turns every problem into one message per field
(`cron`, `args.url`), raised as ScheduleError, which the form shows next to each field and the
import prints one line each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn, Required, Self, TypedDict, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from webapp import cron
from webapp.catalog import ArgsError, Catalog, UnknownJobError
from webapp.catalog.ssrf import (
    ALLOWED_HOSTS_SETTING,
    HostList,
    WebhookError,
    check_allowed_host,
    parse_webhook_url,
)
from webapp.database import bad_text, name_problem
from webapp.models import (
    EMAIL,
    MAX_NOTIFY_EMAILS,
    MAX_SCHEDULE_NAME,
    MAX_URL,
    SCHEDULE_KEY,
    CalendarPolicy,
    MisfirePolicy,
    OverlapPolicy,
    Scope,
)
from webapp.scheduler.jitter import ALWAYS_ALLOWED, MAX_JITTER, jitter_limit, jitter_rule

# Fires looked at to find a schedule's shortest gap for the minimum-interval quota.
INTERVAL_SAMPLE = 500
# Our wording for pydantic's own errors on the schedule's fields (a job's parameters keep
# pydantic's wording: the job's author chose those models).
FIELD_MESSAGES = {
    "missing": "field required",
    "extra_forbidden": "unknown field",
    "string_type": "must be text",
    "bool_type": "must be true or false",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "int_type": "must be a whole number",
    "list_type": "must be a list",
}
PAUSE_AFTER_RANGE = (1, 1000)


class ScheduleError(ValueError):
    """Bad input for a schedule: field name -> message, shown next to the field."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(format_error(f, m) for f, m in self.errors.items()))


def format_error(field_name: str, message: str) -> str:
    """One problem on one line: `cron: ...`; a message that names its field already ("job
    'os.system' is not in the catalog") and a problem of the whole item stand alone."""
    if not field_name or (field_name == "job" and message.startswith("job ")):
        return message
    return f"{field_name}: {message}"


class ScheduleInput(TypedDict, total=False):
    """A schedule as code asks for it: the fields of ScheduleIn, not yet checked."""

    key: str  # absent: derived from the name
    name: Required[str]
    job: Required[str]
    cron: Required[str]
    time_zone: Required[str]
    args: dict[str, Any]
    active: bool
    misfire_policy: MisfirePolicy
    overlap_policy: OverlapPolicy
    notify_emails: list[str]
    notify_webhook_url: str | None
    pause_after_failures: int | None
    jitter_seconds: int | None
    calendar: str | None
    calendar_policy: CalendarPolicy


def check_notify_emails(addresses: list[str], limit: int) -> list[str]:
    """The addresses, trimmed and each once, or ValueError naming the first that is not one, or
    saying there are more than `limit` (SCHEDULER_NOTIFY_MAX_RECIPIENTS)."""
    cleaned = list(dict.fromkeys(address.strip() for address in addresses if address.strip()))
    for address in cleaned:
        if not EMAIL.fullmatch(address):
            raise ValueError(f"“{address[:100]}” is not an email address")
    if len(cleaned) > min(limit, MAX_NOTIFY_EMAILS):
        raise ValueError(f"at most {min(limit, MAX_NOTIFY_EMAILS)} addresses, not {len(cleaned)}")
    return cleaned


def check_notify_webhook_url(url: str | None, settings: Mapping[str, object] | None) -> str | None:
    """The URL (None when blank), if it is http(s) to a host the operator allows, or ValueError.

    Only the allowlist is checked here, without DNS: the addresses are checked at each send
    (outbox), where the SSRF guard of http.webhook runs whole."""
    if url is None or not url.strip():
        return None
    url = url.strip()
    if len(url) > MAX_URL:
        raise ValueError(f"the URL is longer than {MAX_URL} characters")
    try:
        parsed = parse_webhook_url(url)
        if settings is not None:
            # _host_list, inside, refuses a setting that is not a list of hosts.
            check_allowed_host(parsed.host, cast(HostList, settings.get(ALLOWED_HOSTS_SETTING)))
    except WebhookError as refused:
        raise ValueError(str(refused)) from None
    return url


@dataclass(frozen=True)
class ScheduleRules:
    """What checking a schedule needs beyond its fields (ScheduleIn's validation context)."""

    catalog: Catalog
    # The app's configuration, which the jobs' parameter checks read; None: checked as at
    # registration (a job module's default schedule).
    settings: Mapping[str, object] | None
    now: datetime
    scope: Scope = "tenant"
    min_interval: int | None = None  # seconds between fires at the least; None: no quota
    # Email addresses a schedule may notify (SCHEDULER_NOTIFY_MAX_RECIPIENTS).
    max_recipients: int = MAX_NOTIFY_EMAILS
    # The keys of the tenant's business calendars, which a schedule may name.
    calendars: frozenset[str] = frozenset()


def problem(message: str) -> NoReturn:
    # The message as a context value, not the template: a '{' in user input stays as it is.
    raise PydanticCustomError("schedule", "{message}", {"message": message})


def rules_of(info: ValidationInfo) -> ScheduleRules:
    if not isinstance(info.context, ScheduleRules):
        raise TypeError("validate a schedule with ScheduleIn.check(data, rules)")
    return info.context


class ScheduleIn(BaseModel):
    """A schedule as asked for, checked. The fields are checked in this order, so that the
    arguments are checked against a known job and the cron expression in a known zone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: StrictStr | None = None  # None: derived from the name
    name: StrictStr
    job: StrictStr
    # Checked when left out too: the job may require some.
    args: dict[str, Any] = Field(default_factory=dict, validate_default=True)
    time_zone: StrictStr
    cron: StrictStr
    misfire_policy: MisfirePolicy = "fire_once"
    overlap_policy: OverlapPolicy = "allow"
    active: StrictBool = True
    # Who hears of failures (empty / None: the tenant's defaults) and when the schedule pauses
    # itself (None: never).
    notify_emails: list[StrictStr] = Field(default_factory=list)
    notify_webhook_url: StrictStr | None = None
    pause_after_failures: int | None = Field(
        default=None,
        strict=True,
        json_schema_extra={"minimum": PAUSE_AFTER_RANGE[0], "maximum": PAUSE_AFTER_RANGE[1]},
    )
    # Each run starts up to this many seconds after its fire time (None: the tenant's default).
    jitter_seconds: int | None = Field(
        default=None, strict=True, json_schema_extra={"minimum": 0, "maximum": MAX_JITTER}
    )
    # The key of the tenant's business calendar its fires follow (None: none), and what a fire
    # at a time the calendar closes does (scheduler.calendar_fires).
    calendar: StrictStr | None = None
    calendar_policy: CalendarPolicy = "skip"

    @classmethod
    def check(cls, data: object, rules: ScheduleRules) -> Self:
        """The schedule, or ScheduleError with every problem by field."""
        unstorable = bad_text(data)  # before anything reads it: no field may hold it
        if unstorable:
            raise ScheduleError(unstorable)
        try:
            return cls.model_validate(data, context=rules)
        except ValidationError as error:
            raise ScheduleError(field_errors(error)) from None

    def next_fire_after(self, now: datetime) -> datetime:
        return cron.validate(self.cron, self.time_zone).next_fire_after(now)

    @field_validator("key")
    @classmethod
    def check_key(cls, key: str | None) -> str | None:
        if key is not None and not SCHEDULE_KEY.fullmatch(key):
            problem(f"invalid key {key!r}: use 1-64 lower-case letters, digits, '_', '.', '-'")
        return key

    @field_validator("name")
    @classmethod
    def check_name(cls, name: str) -> str:
        name = name.strip()
        if not name:
            problem("a name is required")
        if len(name) > MAX_SCHEDULE_NAME:
            problem(f"the name is longer than {MAX_SCHEDULE_NAME} characters")
        unfit = name_problem(name)
        if unfit:
            problem(f"the name {unfit}")
        return name

    @field_validator("job")
    @classmethod
    def check_job(cls, job: str, info: ValidationInfo) -> str:
        rules = rules_of(info)
        try:
            spec = rules.catalog.get(job)
        except UnknownJobError as error:
            problem(str(error))
        refused = spec.scope_problem(rules.scope)
        if refused:
            problem(refused)
        return spec.name

    @field_validator("args", mode="before")
    @classmethod
    def check_args(cls, args: object, info: ValidationInfo) -> dict[str, Any]:
        """The arguments as the job's parameters model normalises them (defaults filled in)."""
        if "job" not in info.data:
            return {}  # no job to check them against: the job's own error says why
        rules = rules_of(info)
        try:
            return rules.catalog.get(info.data["job"]).validate_args(args, rules.settings)
        except ArgsError as error:
            raise args_errors(error.errors, args) from None

    @field_validator("time_zone")
    @classmethod
    def check_zone(cls, time_zone: str) -> str:
        try:
            return cron.check_time_zone(time_zone)  # the rule the tick checks too
        except cron.CronError as error:
            problem(str(error))

    @field_validator("cron")
    @classmethod
    def check_cron(cls, expression: str, info: ValidationInfo) -> str:
        """The expression as stored (whitespace normalised), if it fires in the zone as often
        as the tenant allows and no more."""
        if "time_zone" not in info.data:
            return expression  # checked in a known zone only: the zone's error says why
        rules = rules_of(info)
        try:
            spec = cron.validate(expression, info.data["time_zone"])
        except cron.CronError as error:
            problem(str(error))
        refused = interval_problem(spec, rules.min_interval, rules.now)
        if refused:
            problem(refused)
        return spec.expression

    @field_validator("notify_emails")
    @classmethod
    def check_emails(cls, addresses: list[str], info: ValidationInfo) -> list[str]:
        try:
            return check_notify_emails(addresses, rules_of(info).max_recipients)
        except ValueError as error:
            problem(str(error))

    @field_validator("notify_webhook_url")
    @classmethod
    def check_webhook_url(cls, url: str | None, info: ValidationInfo) -> str | None:
        try:
            return check_notify_webhook_url(url, rules_of(info).settings)
        except ValueError as error:
            problem(str(error))

    @field_validator("pause_after_failures")
    @classmethod
    def check_pause_after(cls, count: int | None) -> int | None:
        low, high = PAUSE_AFTER_RANGE
        if count is not None and not low <= count <= high:
            problem(f"pause after {low} to {high} failed runs, or leave it blank for never")
        return count

    @field_validator("jitter_seconds")
    @classmethod
    def check_jitter(cls, seconds: int | None, info: ValidationInfo) -> int | None:
        """At most half the shortest interval between the schedule's fires, and an hour."""
        if seconds is None:
            return None
        spec = None
        if "cron" in info.data and "time_zone" in info.data:  # else their own errors say why
            spec = cron.validate(info.data["cron"], info.data["time_zone"])
        refused = jitter_problem(seconds, spec, rules_of(info).now)
        if refused:
            problem(refused)
        return seconds

    @field_validator("calendar")
    @classmethod
    def check_calendar(cls, key: str | None, info: ValidationInfo) -> str | None:
        """One of the tenant's calendars, by key (blank: none)."""
        key = (key or "").strip() or None
        known = rules_of(info).calendars
        if key is not None and key not in known:
            valid = ", ".join(sorted(known)) if known else "none: this tenant has no calendars"
            problem(f"no calendar with key {key!r}; the valid keys: {valid}")
        return key


def interval_problem(spec: cron.CronSpec, min_interval: int | None, now: datetime) -> str | None:
    """Why the schedule fires more often than the tenant allows (`min_interval` seconds between
    fires at the least; None: no limit), or None: the rule of a save and of the preview."""
    if not min_interval:
        return None
    gap = spec.shortest_gap(now, INTERVAL_SAMPLE)
    if gap is None or gap >= timedelta(seconds=min_interval):
        return None
    return (
        f"fires as often as every {int(gap.total_seconds())} s; this tenant "
        f"allows at most one fire every {min_interval} s"
    )


def jitter_problem(seconds: int, spec: cron.CronSpec | None, now: datetime) -> str | None:
    """Why `seconds` is not a jitter this schedule may have (the rule stated), or None. Without
    a valid expression only the general bound is checked."""
    limit = MAX_JITTER
    if spec is not None and seconds > ALWAYS_ALLOWED:
        limit = jitter_limit(spec, now)
    if 0 <= seconds <= limit:
        return None
    return f"{jitter_rule(limit)}, not {seconds}"


class ImportItem(ScheduleIn):
    """A schedule of an import file: the key, which names it across imports, is required."""

    key: StrictStr


def args_errors(errors: list[tuple[str, str]], args: object) -> ValidationError:
    """The job's (parameter, message) pairs as errors located under `args` (`args.url`)."""
    return ValidationError.from_exception_data(
        "args",
        [
            InitErrorDetails(
                type=PydanticCustomError("args", "{message}", {"message": message}),
                loc=(path,) if path else (),
                input=args,
            )
            for path, message in errors
        ],
    )


def field_errors(error: ValidationError, model: type[BaseModel] | None = None) -> dict[str, str]:
    """Pydantic's errors as one message per field, the first when a field has several, in our
    words (`model`'s choices for a wrong one: ScheduleIn's unless another model was checked)."""
    fields = (model or ScheduleIn).model_fields
    errors: dict[str, str] = {}
    for detail in error.errors(include_url=False):
        loc = detail["loc"]
        name = ".".join(str(part) for part in loc)
        if name in errors:
            continue
        message = FIELD_MESSAGES.get(detail["type"], detail["msg"])
        if detail["type"] == "literal_error" and str(loc[0]) in fields:
            allowed = literal_values(fields[str(loc[0])].annotation)
            message = f"{detail['input']!r} is not one of {', '.join(allowed)}"
        errors[name] = message
    return errors


def literal_values(annotation: object) -> list[str]:
    """The choices of a `Literal[...]` annotation, also inside `Literal[...] | None`."""
    values: list[str] = []
    for arg in get_args(annotation):
        if isinstance(arg, str):
            values.append(arg)
        else:
            values += literal_values(arg)
    return values
