"""`flask tenant ...` and `flask user ...`: happy paths and every bad input, on both databases."""

from __future__ import annotations

import pytest
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select
from werkzeug.security import check_password_hash

from tests.conftest import PRODUCT_PASSWORD_METHOD, World, migrated_app
from webapp.extensions import db
from webapp.models import AuditEvent, Membership, Tenant, User
from webapp.services import accounts


def count(model: type) -> int:
    return int(db.session.scalar(select(func.count()).select_from(model)) or 0)


def test_tenant_create_stores_the_tenant(cli: FlaskCliRunner) -> None:
    result = cli.invoke(
        args=["tenant", "create", "acme", "--name", "Acme", "--time-zone", "Asia/Kolkata"]
    )
    assert result.exit_code == 0, result.output
    assert result.output == "created tenant acme (Acme, Asia/Kolkata)\n"
    tenant = db.session.scalar(select(Tenant).where(Tenant.slug == "acme"))
    assert tenant is not None and tenant.time_zone == "Asia/Kolkata"
    created = db.session.execute(
        select(
            AuditEvent.action, AuditEvent.actor_label, AuditEvent.tenant_id, AuditEvent.after
        ).where(AuditEvent.object_type == "tenant")
    ).all()  # audited in the new tenant's own log
    assert created == [
        ("tenant.created", "cli", tenant.id, {"name": "Acme", "time_zone": "Asia/Kolkata"})
    ]


def test_tenant_create_names_the_zone_whatever_its_case_and_warns_of_a_fixed_offset(
    cli: FlaskCliRunner,
) -> None:
    result = cli.invoke(
        args=["tenant", "create", "acme", "--name", "A", "--time-zone", "asia/tokyo"]
    )
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "created tenant acme (A, Asia/Tokyo)\n",
        "",
    )
    result = cli.invoke(args=["tenant", "create", "east", "--name", "E", "--time-zone", "EST"])
    assert result.exit_code == 0 and result.stdout == "created tenant east (E, EST)\n"
    assert result.stderr.startswith("warning: EST is a legacy fixed offset, UTC-05:00 all year")
    refused = cli.invoke(args=["tenant", "create", "x", "--name", "X", "--time-zone", "Tokyo"])
    assert refused.output == "Error: unknown time zone 'Tokyo': did you mean Asia/Tokyo?\n"


def test_tenant_create_defaults_to_utc(cli: FlaskCliRunner) -> None:
    cli.invoke(args=["tenant", "create", "acme", "--name", "Acme"])
    assert db.session.scalar(select(Tenant.time_zone).where(Tenant.slug == "acme")) == "UTC"


def test_tenant_create_refuses_an_unknown_time_zone(cli: FlaskCliRunner) -> None:
    result = cli.invoke(
        args=["tenant", "create", "acme", "--name", "A", "--time-zone", "Mars/Olympus"]
    )
    assert result.exit_code == 1
    assert result.output == "Error: unknown time zone 'Mars/Olympus'\n"
    assert count(Tenant) == 0


def test_tenant_create_refuses_a_malformed_slug(cli: FlaskCliRunner) -> None:
    for slug in ("Acme", "acme_inc", "acme.io", "a" * 64, "acme-", ""):
        result = cli.invoke(args=["tenant", "create", slug, "--name", "Acme"])
        assert result.exit_code == 1
        assert result.output.startswith(f"Error: invalid slug '{slug}'")
    assert count(Tenant) == 0


def test_tenant_create_refuses_a_duplicate_slug(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["tenant", "create", "alpha", "--name", "Another"])
    assert result.exit_code == 1
    assert result.output == "Error: a tenant with slug 'alpha' already exists\n"
    assert db.session.scalar(select(Tenant.name).where(Tenant.slug == "alpha")) == "Alpha Corp"


def test_tenant_create_without_a_name_is_a_usage_error(cli: FlaskCliRunner) -> None:
    result = cli.invoke(args=["tenant", "create", "acme"])
    assert result.exit_code == 2
    assert "Missing option '--name'" in result.output


def test_tenant_list_prints_one_line_per_tenant(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["tenant", "list"])
    assert result.output == (
        "alpha\tEurope/Berlin\tAlpha Corp\tmax running no cap (default)\n"
        "beta\tAmerica/New_York\tBeta Ltd\tmax running no cap (default)\n"
    )


def test_user_create_normalises_the_email_and_hashes_the_password(
    cli: FlaskCliRunner, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At the product's own cost, not the tests' cheaper one (conftest.TEST_PASSWORD_METHOD).
    monkeypatch.setattr(accounts, "PASSWORD_METHOD", PRODUCT_PASSWORD_METHOD)
    result = cli.invoke(
        args=[
            "user",
            "create",
            "  Dora@Example.COM ",
            "--tenant",
            "alpha",
            "--role",
            "viewer",
            "--password-stdin",
        ],
        input="a-long-password\n",
    )
    assert result.exit_code == 0, result.output
    assert result.output == "created user dora@example.com: viewer of alpha\n"
    user = db.session.scalar(select(User).where(User.email == "dora@example.com"))
    assert user is not None
    assert user.password_hash.startswith("scrypt:32768:8:1$")  # werkzeug's default cost
    assert "a-long-password" not in user.password_hash
    assert check_password_hash(user.password_hash, "a-long-password")


def test_user_create_for_a_second_tenant_adds_a_membership(
    cli: FlaskCliRunner, world: World
) -> None:
    result = cli.invoke(
        args=["user", "create", "ALICE@example.com", "--tenant", "beta", "--role", "viewer"]
    )
    assert result.exit_code == 0, result.output
    assert result.output == "updated user alice@example.com: viewer of beta\n"
    roles = db.session.execute(
        select(Tenant.slug, Membership.role)
        .join(Membership, Membership.tenant_id == Tenant.id)
        .where(Membership.user_id == world.alice.id)
        .order_by(Tenant.slug)
    ).all()
    assert [tuple(row) for row in roles] == [("alpha", "admin"), ("beta", "viewer")]
    assert count(User) == 3


def test_user_create_refuses_a_short_password(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(
        args=[
            "user",
            "create",
            "dora@example.com",
            "--tenant",
            "alpha",
            "--role",
            "admin",
            "--password-stdin",
        ],
        input="short\n",
    )
    assert result.exit_code == 1
    assert result.output == "Error: password too short: use at least 10 characters\n"
    assert count(User) == 3


def test_user_create_refuses_a_malformed_email(cli: FlaskCliRunner, world: World) -> None:
    # The one email rule, the notification recipients' too: no IP literal, a real top-level domain.
    for email in ("not-an-email", "a@b", "a b@example.com", "ops@[10.0.0.1]", "ops@example.c"):
        result = cli.invoke(
            args=[
                "user",
                "create",
                email,
                "--tenant",
                "alpha",
                "--role",
                "admin",
                "--password-stdin",
            ],
            input="a-long-password\n",
        )
        assert result.exit_code == 1
        assert result.output.startswith("Error: invalid email address")
    assert count(User) == 3


def test_user_create_refuses_a_missing_tenant(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(
        args=[
            "user",
            "create",
            "dora@example.com",
            "--tenant",
            "gamma",
            "--role",
            "admin",
            "--password-stdin",
        ],
        input="a-long-password\n",
    )
    assert result.exit_code == 1
    assert result.output == "Error: no tenant with slug 'gamma'\n"
    assert count(User) == 3


def test_user_create_refuses_an_unknown_role(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(
        args=["user", "create", "dora@example.com", "--tenant", "alpha", "--role", "owner"]
    )
    assert result.exit_code == 2
    assert "'owner' is not one of 'admin', 'viewer'" in result.output


def test_new_user_without_a_password_is_refused_and_nothing_is_written(
    cli: FlaskCliRunner, world: World
) -> None:
    result = cli.invoke(
        args=["user", "create", "dora@example.com", "--tenant", "alpha", "--role", "admin"]
    )
    assert result.exit_code == 1
    assert result.output == "Error: a password is needed to create the new user dora@example.com\n"
    assert count(User) == 3 and count(Membership) == 3


def test_user_list_shows_the_tenants_members_only(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["user", "list", "--tenant", "alpha"])
    assert result.output == "alice@example.com\tadmin\nbob@example.com\tviewer\n"


def test_an_unreachable_database_is_one_line_not_a_traceback() -> None:
    app = migrated_app("postgresql+psycopg://nobody@127.0.0.1:1/nothing")
    result = app.test_cli_runner().invoke(args=["tenant", "list"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot use the database: ")
    assert result.output.count("\n") == 1
    assert "Traceback" not in result.output


def test_demo_seeds_a_tenant_with_schedules_and_history_once(cli: FlaskCliRunner) -> None:
    from webapp.models import Run, Schedule

    for _ in range(2):
        result = cli.invoke(args=["demo"])
        assert result.exit_code == 0, result.output
    assert "log in as admin@demo.example / demo-password" in result.output
    assert [t.slug for t in db.session.scalars(select(Tenant))] == ["demo"]
    # An admin, a viewer and an operator; the 4 demo schedules and the system default.
    assert count(User) == 3 and count(Schedule) == 5
    operators = db.session.scalars(select(User.email).where(User.is_operator)).all()
    assert operators == ["operator@demo.example"]
    assert count(Run) > 0


def cli_events() -> list[tuple[str, str, str | None, int | None, object, object]]:
    rows = db.session.execute(
        select(
            AuditEvent.action,
            AuditEvent.actor_label,
            AuditEvent.object_label,
            AuditEvent.tenant_id,
            AuditEvent.before,
            AuditEvent.after,
        )
        .where(AuditEvent.object_type == "user")
        .order_by(AuditEvent.id)
    )
    return [tuple(row) for row in rows]


def test_every_user_change_from_the_command_line_is_audited(
    cli: FlaskCliRunner, world: World
) -> None:
    """user create, a new role, a new password, user remove and user revoke-sessions each write
    an audit row naming the command line: in the tenant's log where a membership changes."""
    alpha, beta = world.alpha.id, world.beta.id
    create = ["user", "create", "carol@example.com", "--role"]
    steps = [
        ([*create, "viewer", "--tenant", "alpha", "--password-stdin"], "a long enough password\n"),
        ([*create, "admin", "--tenant", "beta"], None),
        ([*create, "viewer", "--tenant", "beta"], None),
        ([*create, "viewer", "--tenant", "beta"], None),  # no change: no row
        (["user", "remove", "carol@example.com", "--tenant", "beta"], None),
        (["user", "revoke-sessions", "carol@example.com"], None),
        ([*create, "viewer", "--tenant", "alpha", "--password-stdin"], "another long password\n"),
    ]
    for args, given in steps:
        result = cli.invoke(args=args, input=given)
        assert result.exit_code == 0, result.output
    carol = "carol@example.com"
    assert cli_events() == [
        ("user.created", "cli", carol, None, None, None),
        ("user.added", "cli", carol, alpha, None, {"role": "viewer"}),
        ("user.added", "cli", carol, beta, None, {"role": "admin"}),
        ("user.role_changed", "cli", carol, beta, {"role": "admin"}, {"role": "viewer"}),
        ("user.removed", "cli", carol, beta, {"role": "viewer"}, {"sessions_ended": 0}),
        ("user.sessions_revoked", "cli", carol, None, None, {"sessions_ended": 0}),
        ("user.password_changed", "cli", carol, None, None, {"sessions_ended": 0}),
    ]
