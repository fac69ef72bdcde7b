"""`flask tenant ...` (create, list, set quotas) and `flask user ...`."""

from __future__ import annotations

import re
import sys

import click
from flask.cli import AppGroup

from webapp import cron
from webapp.cli import reports_errors
from webapp.config import settings
from webapp.models import ROLES
from webapp.services import accounts, two_factor
from webapp.services.account_schema import MAX_INTEGER, AccountError
from webapp.services.audit import Actor

tenant_cli = AppGroup("tenant", help="Create and list tenants.")
user_cli = AppGroup("user", help="Create and list users.")


@tenant_cli.command("create")
@click.argument("slug")
@click.option("--name", required=True, help="Display name of the tenant.")
@click.option("--time-zone", default="UTC", show_default=True, help="IANA zone for new schedules.")
@reports_errors
def create_tenant(slug: str, name: str, time_zone: str) -> None:
    """Create a tenant."""
    tenant = accounts.create_tenant(slug, name, time_zone)
    click.echo(f"created tenant {tenant.slug} ({tenant.name}, {tenant.time_zone})")
    warning = cron.zone_warning(tenant.time_zone)
    if warning:
        click.echo(f"warning: {warning}", err=True)


@tenant_cli.command("list")
@reports_errors
def list_tenants() -> None:
    """List tenants, one per line: slug, time zone, name, cap on running runs."""
    default = settings().SCHEDULER_MAX_RUNNING
    for tenant in accounts.list_tenants():
        cap = describe_cap(tenant.max_running, default)
        click.echo(f"{tenant.slug}\t{tenant.time_zone}\t{tenant.name}\tmax running {cap}")


@user_cli.command("create")
@click.argument("email")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant to join.")
@click.option(
    "--role", type=click.Choice(ROLES), required=True, help="What the user may do in the tenant."
)
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.option("--operator", is_flag=True, help="Also make the user an operator (/operator).")
@reports_errors
def create_user(
    email: str, tenant_slug: str, role: str, password_stdin: bool, operator: bool
) -> None:
    """Create a user in a tenant, or add an existing user to another tenant."""
    password = read_password(password_stdin)
    added = accounts.add_user(email, tenant_slug, role, password, operator=operator)
    verb = "created user" if added.created else "updated user"
    also = ", operator" if operator else ""
    click.echo(f"{verb} {added.user.email}: {role} of {tenant_slug}{also}")


@user_cli.command("set-operator")
@click.argument("email")
@click.option(
    "--operator/--no-operator",
    default=True,
    help="Grant the operator role (default) or take it away.",
)
@reports_errors
def set_operator(email: str, operator: bool) -> None:
    """Make a user an operator (the /operator area, a read-only view of every tenant)."""
    user = accounts.set_operator(email, operator, Actor.cli())
    state = "is now an operator" if operator else "is no longer an operator"
    click.echo(f"{user.email} {state}")


@user_cli.command("list")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant.")
@reports_errors
def list_users(tenant_slug: str) -> None:
    """List a tenant's users, one per line: email and role."""
    for user, role in accounts.list_members(tenant_slug):
        click.echo(f"{user.email}\t{role}")


@user_cli.command("remove")
@click.argument("email")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the tenant to leave.")
@reports_errors
def remove_user(email: str, tenant_slug: str) -> None:
    """Take a user out of a tenant and end all the user's sessions."""
    accounts.remove_member(email, tenant_slug)
    click.echo(f"removed {email.strip().lower()} from {tenant_slug}; their sessions are ended")


@user_cli.command("revoke-sessions")
@click.argument("email")
@reports_errors
def revoke_sessions(email: str) -> None:
    """End every session of a user at once (a lost laptop, a departing employee)."""
    count = accounts.revoke_sessions(email)
    click.echo(f"ended {count} session{'s' if count != 1 else ''} of {email.strip().lower()}")


@user_cli.command("reset-two-factor")
@click.argument("email")
@reports_errors
def reset_two_factor(email: str) -> None:
    """Turn off a user's two-factor login (a lost phone and lost recovery codes); audited."""
    user = two_factor.reset(email, Actor.cli())
    click.echo(f"two-factor login of {user.email} is off: they log in with the password alone")


def describe_cap(own: int | None, default: int | None) -> str:
    if own is not None:
        return str(own)
    return "no cap (default)" if default is None else f"{default} (default)"


def read_password(from_stdin: bool) -> str | None:
    """The password from stdin (first line), a hidden prompt on a terminal, or None."""
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if sys.stdin.isatty():
        return str(click.prompt("Password", hide_input=True, confirmation_prompt=True))
    return None


# LimitsIn's fields as `tenant set` names them.
LIMIT_OPTIONS = {
    "max_schedules": "--max-schedules",
    "min_interval_seconds": "--min-interval",
    "retention_days": "--retention-days",
    "max_running": "--max-running",
    "jitter_seconds": "--jitter-seconds",
}


@tenant_cli.command("set")
@click.argument("slug")
@click.option("--max-schedules", help="Most schedules the tenant may have; 'default' to clear.")
@click.option("--min-interval", help="Fewest seconds between fires; 'default' to clear.")
@click.option(
    "--retention-days",
    help="Days of run history kept (1-3650) before runs are folded into daily roll-ups; "
    "'default' for SCHEDULER_RUN_RETENTION_DAYS.",
)
@click.option(
    "--max-running",
    help="Most of the tenant's runs running at once across all workers (1 or more); "
    "'default' for SCHEDULER_MAX_RUNNING.",
)
@click.option(
    "--jitter-seconds",
    help="Default spread of a run's start after its fire time (0-3600 s) for the tenant's "
    "schedules without their own; 'default' for none.",
)
@click.option(
    "--require-two-factor/--no-require-two-factor",
    default=None,
    help="Require two-factor login of the tenant's admins (password logins), or stop.",
)
@reports_errors
def set_tenant(
    slug: str,
    max_schedules: str | None,
    min_interval: str | None,
    retention_days: str | None,
    max_running: str | None,
    jitter_seconds: str | None,
    require_two_factor: bool | None,
) -> None:
    """Set a tenant's quotas, run retention, cap on running runs, default jitter and whether
    its admins must use two-factor login (unset options keep their value)."""
    tenant = accounts.find_tenant(slug)
    limits = {field: getattr(tenant, field) for field in LIMIT_OPTIONS}
    given_options = zip(
        LIMIT_OPTIONS,
        (max_schedules, min_interval, retention_days, max_running, jitter_seconds),
        strict=True,
    )
    for field, given in given_options:
        if given is None:
            continue
        if given == "default":
            limits[field] = None
        elif re.fullmatch(r"-?[0-9]{1,10}", given):
            limits[field] = int(given)  # LimitsIn says what is out of bounds
        else:
            message = f"{given!r} is not a whole number up to {MAX_INTEGER} or 'default'"
            raise click.BadParameter(message, param_hint=LIMIT_OPTIONS[field])
    try:
        tenant = accounts.set_limits(slug, limits)
    except AccountError as error:  # LimitsIn's field -> our option
        field, message = next(iter(error.errors.items()))
        raise AccountError(f"{LIMIT_OPTIONS.get(field, field)} {message}, or 'default'") from None
    shown = {
        option: "default" if limits[field] is None else limits[field]
        for field, option in LIMIT_OPTIONS.items()
    }
    # The jitter only when asked about or set, so that the line stays as scripts know it.
    jitter = (
        f", jitter seconds {shown['--jitter-seconds']}"
        if jitter_seconds is not None or tenant.jitter_seconds is not None
        else ""
    )
    # Likewise the requirement, which the panel's Settings page also sets.
    required = ""
    if require_two_factor is not None:
        two_factor.require_for_admins(tenant, require_two_factor, Actor.cli())
        required = f", two-factor required for admins {'yes' if require_two_factor else 'no'}"
    click.echo(
        f"tenant {tenant.slug}: max schedules {shown['--max-schedules']}, "
        f"min interval {shown['--min-interval']}, retention days {shown['--retention-days']}, "
        f"max running {shown['--max-running']}"
        f"{jitter}{required}"
    )
