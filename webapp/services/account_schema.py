"""What a tenant, a tenant's limits and a user may be, checked once: the inputs of the command
line today (and of any other way in), beside ScheduleIn for schedules.

Each model's check answers the input cleaned or AccountError with one message per field; the
messages name no field, so that each way in says it its own way (the CLI names its options).
"""

from __future__ import annotations

import re
from typing import Self

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError, field_validator

from webapp import cron
from webapp.config import RETENTION_DAYS_RANGE
from webapp.database import bad_text, name_problem
from webapp.models import EMAIL, Role
from webapp.scheduler.jitter import MAX_JITTER
from webapp.services.schema import field_errors, problem

SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
MAX_TENANT_NAME = 200
MIN_PASSWORD_LENGTH = 10
MAX_INTEGER = 2**31 - 1  # PostgreSQL integer columns


class AccountError(ValueError):
    """Bad input for a tenant or user change: field -> message. `str()` is the first message
    (with its field's name where the message needs it), shown to the operator as is."""

    def __init__(self, errors: dict[str, str] | str) -> None:
        self.errors = {"": errors} if isinstance(errors, str) else dict(errors)
        super().__init__(next(iter(self.errors.values())))


class Checked(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def check(cls, data: object) -> Self:
        """The input, checked, or AccountError with every problem by field."""
        unstorable = bad_text(data)
        if unstorable:  # named in the message too: the command line shows the message alone
            raise AccountError({field: f"{field} {why}" for field, why in unstorable.items()})
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise AccountError(field_errors(error, cls)) from None


class TenantIn(Checked):
    slug: StrictStr
    name: StrictStr
    time_zone: StrictStr = "UTC"

    @field_validator("slug")
    @classmethod
    def check_slug(cls, slug: str) -> str:
        if not SLUG.fullmatch(slug):
            problem(
                f"invalid slug {slug!r}: use 1-63 lower-case letters, digits and hyphens, "
                "starting and ending with a letter or digit"
            )
        return slug

    @field_validator("name")
    @classmethod
    def check_name(cls, name: str) -> str:
        name = name.strip()
        if not name:
            problem("the tenant name must not be empty")
        if len(name) > MAX_TENANT_NAME:
            problem(f"the tenant name must be at most {MAX_TENANT_NAME} characters")
        unfit = name_problem(name)
        if unfit:
            problem(f"the tenant name {unfit}")
        return name

    @field_validator("time_zone")
    @classmethod
    def check_zone(cls, time_zone: str) -> str:
        try:
            return cron.check_time_zone(time_zone)  # the one zone rule
        except cron.CronError as error:
            problem(str(error))


def in_range(value: int | None, low: int, high: int, unit: str = "") -> int | None:
    if value is not None and not low <= value <= high:
        problem(f"must be from {low} to {high}{unit}")
    return value


class LimitsIn(Checked):
    """A tenant's own limits; None: the operator-wide default (SCHEDULER_MAX_SCHEDULES,
    SCHEDULER_MIN_INTERVAL, SCHEDULER_RUN_RETENTION_DAYS, SCHEDULER_MAX_RUNNING; no jitter)."""

    max_schedules: StrictInt | None = None
    min_interval_seconds: StrictInt | None = None
    retention_days: StrictInt | None = None
    max_running: StrictInt | None = None
    jitter_seconds: StrictInt | None = None

    @field_validator("max_schedules", "min_interval_seconds")
    @classmethod
    def check_quota(cls, value: int | None) -> int | None:
        return in_range(value, 0, MAX_INTEGER)

    @field_validator("retention_days")
    @classmethod
    def check_retention(cls, days: int | None) -> int | None:
        return in_range(days, *RETENTION_DAYS_RANGE, " days")

    @field_validator("max_running")
    @classmethod
    def check_max_running(cls, runs: int | None) -> int | None:
        # 0 would never start the tenant's runs: pausing its schedules says that honestly.
        if runs is not None and not 1 <= runs <= MAX_INTEGER:
            problem(f"must be a whole number of runs from 1 to {MAX_INTEGER}")
        return runs

    @field_validator("jitter_seconds")
    @classmethod
    def check_jitter(cls, seconds: int | None) -> int | None:
        # A schedule's jitter is also at most half its shortest interval between fires: the
        # tick shortens the default for such schedules.
        return in_range(seconds, 0, MAX_JITTER, " s")


class UserIn(Checked):
    """A user's membership as asked for; `password` None keeps an existing user's."""

    email: StrictStr
    role: Role
    password: StrictStr | None = None

    @field_validator("email")
    @classmethod
    def check_email(cls, email: str) -> str:
        email = email.strip().lower()
        if not EMAIL.fullmatch(email):  # the one email rule, as for notification recipients
            problem(f"invalid email address {email!r}")
        return email

    @field_validator("password")
    @classmethod
    def check_password(cls, password: str | None) -> str | None:
        if password is not None and len(password) < MIN_PASSWORD_LENGTH:
            problem(f"password too short: use at least {MIN_PASSWORD_LENGTH} characters")
        return password


def email_of(text: str) -> str:
    """An email address as stored (trimmed, lower-case), or AccountError: UserIn's rule."""
    return UserIn.check({"email": text, "role": "viewer"}).email
