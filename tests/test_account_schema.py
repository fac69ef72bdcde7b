"""Tenants, limits and users are checked once, by pydantic models beside ScheduleIn, with the
same email and time zone rules as schedules: every problem at once, by field."""

from __future__ import annotations

import pytest

from webapp.services.account_schema import AccountError, LimitsIn, TenantIn, UserIn
from webapp.services.schema import check_notify_emails


def errors_of(model: type[TenantIn | LimitsIn | UserIn], data: dict[str, object]) -> dict[str, str]:
    with pytest.raises(AccountError) as refused:
        model.check(data)
    return refused.value.errors


def test_a_tenant_with_every_field_wrong_is_refused_field_by_field() -> None:
    assert errors_of(TenantIn, {"slug": "Bad Slug", "name": "  ", "time_zone": "Mars/Base"}) == {
        "slug": "invalid slug 'Bad Slug': use 1-63 lower-case letters, digits and hyphens, "
        "starting and ending with a letter or digit",
        "name": "the tenant name must not be empty",
        "time_zone": "unknown time zone 'Mars/Base'",
    }


def test_a_tenant_is_cleaned_and_zones_follow_the_schedules_rule() -> None:
    tenant = TenantIn.check({"slug": "acme", "name": "  Acme  ", "time_zone": "Asia/Kolkata"})
    assert (tenant.slug, tenant.name, tenant.time_zone) == ("acme", "Acme", "Asia/Kolkata")
    # The host's `localtime` is no zone a schedule may use, so no tenant's either.
    assert "time_zone" in errors_of(TenantIn, {"slug": "a", "name": "A", "time_zone": "localtime"})


def test_limits_out_of_bounds_are_each_named() -> None:
    assert errors_of(
        LimitsIn,
        {"max_schedules": -1, "retention_days": 0, "max_running": 0, "jitter_seconds": 3601},
    ) == {
        "max_schedules": "must be from 0 to 2147483647",
        "retention_days": "must be from 1 to 3650 days",
        "max_running": "must be a whole number of runs from 1 to 2147483647",
        "jitter_seconds": "must be from 0 to 3600 s",
    }
    assert LimitsIn.check({"max_running": 1, "retention_days": None}).max_running == 1


@pytest.mark.parametrize(
    "address",
    [
        "ops@example.com",
        "First.Last+tag@sub.example.org",
        "ops@[10.0.0.1]",
        "ops@example.c",
        "ops@localhost",
        "a b@example.com",
        "ops@exa_mple.com",
    ],
)
def test_a_user_email_follows_the_notification_recipients_rule(address: str) -> None:
    try:
        check_notify_emails([address], 20)
        recipient = True
    except ValueError:
        recipient = False
    try:
        UserIn.check({"email": address, "role": "viewer"})
        user = True
    except AccountError:
        user = False
    assert user == recipient


def test_a_user_email_is_stored_lower_case_and_a_short_password_refused() -> None:
    assert UserIn.check({"email": " Dora@Example.COM ", "role": "admin"}).email == (
        "dora@example.com"
    )
    assert errors_of(
        UserIn, {"email": "dora@example.com", "role": "boss", "password": "short"}
    ) == {
        "role": "'boss' is not one of admin, viewer",
        "password": "password too short: use at least 10 characters",
    }


def test_text_the_database_cannot_store_is_refused_naming_the_field() -> None:
    # A command line hands an undecodable byte over as a lone surrogate (surrogateescape).
    assert errors_of(TenantIn, {"slug": "acme", "name": "Acme \udcff"}) == {
        "name": "name is not valid text: it holds a lone surrogate (U+DCFF)"
    }
    assert errors_of(UserIn, {"email": "a\x00@example.com", "role": "admin"}) == {
        "email": "email must not contain a NUL character"
    }
