"""The operator API under /api/v1/admin/: operator tokens (made by `flask token create
--operator`), who may use which endpoints, on both databases."""

from __future__ import annotations

import re
import threading
import time

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, insert, select, text
from werkzeug.test import TestResponse

from tests.api_helpers import Api, OperatorApi, problem_fields
from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import Panel
from tests.settings_support import reconfigure
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Tenant, User
from webapp.services import tokens
from webapp.token_models import ApiToken

SECRET = re.compile(r"sch_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


def test_cli_creates_an_operator_token_lists_and_revokes_it(
    cli: FlaskCliRunner, world: World
) -> None:
    created = cli.invoke(
        args=["token", "create", "--operator", "--name", "Provisioning", "--expires-in", "30"]
    )
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip()
    assert SECRET.fullmatch(secret) and created.stdout == secret + "\n"
    prefix = secret.split("_")[1]
    listed = cli.invoke(args=["token", "list", "--operator"]).stdout.strip().split("\t")
    assert listed[:6] == [prefix, "write", "active", "Provisioning", "cli", "never"]
    assert cli.invoke(args=["token", "list", "--tenant", "alpha"]).stdout == ""
    found = tokens.authenticate(secret, utcnow())
    assert found is not None and found.is_operator and found.tenant_id is None
    revoked = cli.invoke(args=["token", "revoke", prefix])
    assert revoked.stdout == f"revoked operator token {prefix} (Provisioning)\n"
    assert "\trevoked\t" in cli.invoke(args=["token", "list", "--operator"]).stdout
    assert tokens.authenticate(secret, utcnow()) is None
    events = db.session.execute(
        select(AuditEvent.action, AuditEvent.tenant_id).where(AuditEvent.object_type == "token")
    )
    assert [tuple(e) for e in events] == [("token.created", None), ("token.revoked", None)]


def test_cli_refuses_an_operator_token_with_a_tenant_or_scope(
    cli: FlaskCliRunner, world: World
) -> None:
    cases = [
        ["--operator", "--tenant", "alpha", "--name", "x"],
        ["--operator", "--scope", "read", "--name", "x"],
        ["--name", "x"],
        ["--tenant", "alpha", "--name", "x"],
        ["--operator", "--name", "  "],
    ]
    for args in cases:
        result = cli.invoke(args=["token", "create", *args])
        assert result.exit_code != 0 and result.stdout == "", (args, result.output)
    assert (
        "an operator token has no --tenant nor --scope"
        in cli.invoke(args=["token", "create", *cases[0]]).output
    )
    assert cli.invoke(args=["token", "list"]).exit_code != 0
    assert cli.invoke(args=["token", "list", "--operator", "--tenant", "alpha"]).exit_code != 0
    assert db.session.scalar(select(ApiToken.id)) is None


def test_the_operator_api_takes_operator_tokens_only(app: Flask, world: World) -> None:
    operator = OperatorApi(app)
    listed = operator.get("/api/v1/admin/tenants")
    assert listed.status_code == 200, listed.get_json()
    assert [t["slug"] for t in listed.get_json()["items"]] == ["alpha", "beta"]
    tenant_token = Api(app, world.alpha, world.alice)
    refused = tenant_token.get("/api/v1/admin/tenants")
    assert refused.status_code == 403
    assert "operator token" in refused.get_json()["detail"]
    problem_fields(refused)  # a problem details document
    anonymous = app.test_client().get("/api/v1/admin/tenants")
    assert anonymous.status_code == 401 and anonymous.mimetype == "application/problem+json"
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_operator_token_never_reads_tenant_data_through_the_tenant_endpoints(
    app: Flask, world: World
) -> None:
    operator = OperatorApi(app)
    for url in ("/api/v1/schedules", "/api/v1/runs", "/api/v1/calendars", "/api/v1/catalog"):
        refused = operator.get(url)
        assert refused.status_code == 403, url
        assert "/api/v1/admin/" in refused.get_json()["detail"]
    assert operator.post("/api/v1/schedules", json={}).status_code == 403


def audit_rows(action: str) -> list[tuple[int | None, str, dict | None]]:
    rows = db.session.execute(
        select(AuditEvent.tenant_id, AuditEvent.actor_label, AuditEvent.after)
        .where(AuditEvent.action == action)
        .order_by(AuditEvent.id)
    )
    return [tuple(row) for row in rows]


def test_an_operator_creates_a_tenant_and_changes_its_name_zone_and_limits(
    app: Flask, world: World
) -> None:
    operator = OperatorApi(app)
    created = operator.post(
        "/api/v1/admin/tenants",
        json={"slug": "acme", "name": "Acme Inc.", "time_zone": "America/Chicago"},
    )
    assert created.status_code == 201, created.get_json()
    assert created.headers["Location"] == "/api/v1/admin/tenants/acme"
    acme = created.get_json()
    assert acme["slug"] == "acme" and acme["max_schedules"] is None
    actor = f"operator token {operator.token.prefix} (provisioning)"
    assert audit_rows("tenant.created") == [
        (acme["id"], actor, {"name": "Acme Inc.", "time_zone": "America/Chicago"})
    ]
    read = operator.get("/api/v1/admin/tenants/acme")
    assert read.get_json() == acme and read.headers["ETag"] == created.headers["ETag"]
    unchanged = operator.get(
        "/api/v1/admin/tenants/acme", headers={"If-None-Match": read.headers["ETag"]}
    )
    assert unchanged.status_code == 304
    changes = {
        "name": "Acme Corporation",
        "time_zone": "Europe/Paris",
        "max_schedules": 10,
        "min_interval_seconds": 300,
        "max_running": 2,
        "retention_days": 30,
        "jitter_seconds": 60,
    }
    patched = operator.patch(
        "/api/v1/admin/tenants/acme", json=changes, headers={"If-Match": read.headers["ETag"]}
    )
    assert patched.status_code == 200, patched.get_json()
    assert {k: patched.get_json()[k] for k in changes} == changes
    assert patched.headers["ETag"] != read.headers["ETag"]
    stale = operator.patch(
        "/api/v1/admin/tenants/acme", json={"name": "X"}, headers={"If-Match": read.headers["ETag"]}
    )
    assert stale.status_code == 412
    back = operator.patch("/api/v1/admin/tenants/acme", json={"max_schedules": None})
    assert back.get_json()["max_schedules"] is None
    assert [(t, a) for t, a, _ in audit_rows("tenant.limits_changed")] == [(acme["id"], actor)] * 2
    assert audit_rows("tenant.changed")[0][2] == {
        "name": "Acme Corporation",
        "time_zone": "Europe/Paris",
    }
    assert [
        t["slug"] for t in operator.get("/api/v1/admin/tenants?limit=2").get_json()["items"]
    ] == [
        "alpha",
        "beta",
    ]
    page = operator.get("/api/v1/admin/tenants?limit=2").get_json()
    rest = operator.get(f"/api/v1/admin/tenants?limit=2&cursor={page['next_cursor']}").get_json()
    assert [t["slug"] for t in rest["items"]] == ["acme"] and rest["next_cursor"] is None


def test_a_retried_create_with_the_same_idempotency_key_creates_one_tenant(
    app: Flask, world: World
) -> None:
    operator = OperatorApi(app)
    new = {"slug": "acme", "name": "Acme"}
    first = operator.post("/api/v1/admin/tenants", json=new, headers={"Idempotency-Key": "k1"})
    again = operator.post("/api/v1/admin/tenants", json=new, headers={"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    taken = operator.post("/api/v1/admin/tenants", json=new)
    assert taken.status_code == 409
    assert problem_fields(taken) == {"slug": "a tenant with slug 'acme' already exists"}


def test_bad_tenant_input_is_refused_by_field_with_the_cli_messages_and_nothing_written(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    operator = OperatorApi(app)
    before = db.session.scalar(select(func.count()).select_from(AuditEvent))
    cases: list[tuple[dict[str, object], str]] = [
        ({"slug": "Bad Slug", "name": "x"}, "slug"),
        ({"slug": "ok", "name": "  "}, "name"),
        ({"slug": "ok", "name": "x", "time_zone": "Mars/Olympus"}, "time_zone"),
        ({"slug": "ok", "name": "x", "extra": 1}, "extra"),
        ({"slug": 5, "name": "x"}, "slug"),
        ({"name": "x"}, "slug"),
    ]
    for data, field in cases:
        refused = operator.post("/api/v1/admin/tenants", json=data)
        assert refused.status_code == 422, (data, refused.get_json())
        assert field in problem_fields(refused), (data, problem_fields(refused))
    # The same words as `flask tenant create`.
    api_words = problem_fields(operator.post("/api/v1/admin/tenants", json=cases[0][0]))["slug"]
    cli_words = cli.invoke(args=["tenant", "create", "Bad Slug", "--name", "x"]).output
    assert api_words in cli_words
    patches: list[tuple[dict[str, object], str]] = [
        ({"max_running": 0}, "max_running"),
        ({"retention_days": 0}, "retention_days"),
        ({"jitter_seconds": -1}, "jitter_seconds"),
        ({"max_schedules": "ten"}, "max_schedules"),
        ({"time_zone": "Nowhere/Land"}, "time_zone"),
        ({"slug": "renamed"}, "slug"),
        ({"name": ""}, "name"),
    ]
    for data, field in patches:
        refused = operator.patch("/api/v1/admin/tenants/alpha", json=data)
        assert refused.status_code == 422, (data, refused.get_json())
        assert field in problem_fields(refused), (data, problem_fields(refused))
    assert operator.get("/api/v1/admin/tenants/nope").status_code == 404
    assert operator.patch("/api/v1/admin/tenants/nope", json={"name": "x"}).status_code == 404
    assert db.session.scalar(select(func.count()).select_from(AuditEvent)) == before
    db.session.refresh(world.alpha)
    assert world.alpha.name == "Alpha Corp" and world.alpha.max_running is None


def test_a_tenant_is_deleted_only_when_empty_or_with_cascade_which_says_what_went(
    app: Flask, world: World
) -> None:
    operator = OperatorApi(app)
    operator.post("/api/v1/admin/tenants", json={"slug": "empty", "name": "Empty"})
    gone = operator.delete("/api/v1/admin/tenants/empty")
    assert gone.status_code == 200, gone.get_json()
    assert gone.get_json()["removed"]["schedules"] == 0
    assert operator.get("/api/v1/admin/tenants/empty").status_code == 404
    schedule = make_schedule(world.alpha, "Nightly", by=world.alice)
    make_run(schedule, "succeeded", 5)
    Api(app, world.alpha, world.alice)  # a token of alpha
    alpha_id = world.alpha.id
    refused = operator.delete("/api/v1/admin/tenants/alpha")
    assert refused.status_code == 409
    assert "cascade=true" in refused.get_json()["detail"]
    assert "1 schedules" in refused.get_json()["detail"]
    assert db.session.get(Tenant, world.alpha.id) is not None
    stale = operator.delete("/api/v1/admin/tenants/alpha?cascade=true", headers={"If-Match": '"x"'})
    assert stale.status_code == 412
    removed = operator.delete("/api/v1/admin/tenants/alpha?cascade=true")
    assert removed.status_code == 200, removed.get_json()
    counts = removed.get_json()["removed"]
    assert {k: counts[k] for k in ("schedules", "runs", "memberships", "tokens")} == {
        "schedules": 1,
        "runs": 1,
        "memberships": 2,
        "tokens": 1,
    }
    assert db.session.get(Tenant, alpha_id) is None
    assert db.session.scalar(select(func.count()).select_from(Run)) == 0
    deleted = audit_rows("tenant.deleted")
    assert [t for t, _, _ in deleted] == [None, None]  # the installation's log: the tenant's went
    assert deleted[1][2]["removed"]["schedules"] == 1  # type: ignore[index]


def test_a_tenant_with_runs_in_flight_is_not_deleted(app: Flask, world: World) -> None:
    operator = OperatorApi(app)
    make_run(world.beta, "running", 1)
    refused = operator.delete("/api/v1/admin/tenants/beta?cascade=true")
    assert refused.status_code == 409 and "running" in refused.get_json()["detail"]
    assert db.session.get(Tenant, world.beta.id) is not None


def test_the_operator_area_lists_operator_tokens_and_revokes_one(app: Flask, world: World) -> None:
    operator = OperatorApi(app, "Host <backend>")
    Api(app, world.alpha, world.alice)  # a tenant's token: not listed there
    charlie = db.session.get(User, world.charlie.id)
    assert charlie is not None
    charlie.is_operator = True
    db.session.commit()
    panel = Panel(app, charlie)
    page = panel.get("/operator/tokens").get_data(as_text=True)
    assert operator.token.prefix in page and "Host &lt;backend&gt;" in page
    assert page.count('name="revoke"') == 1  # the tenant's token is not the operator's
    url = f"/operator/tokens/{operator.token.id}/revoke"
    assert panel.post(url, csrf=False).status_code == 400  # no CSRF token: nothing revoked
    assert operator.get("/api/v1/admin/tenants").status_code == 200
    assert Panel(app, world.alice).post(url).status_code == 404  # no operator: no such page
    assert Panel(app, world.alice).get("/operator/tokens").status_code == 404
    revoked = panel.post(url)
    assert revoked.status_code == 200 and revoked.headers["HX-Redirect"] == "/operator/tokens"
    assert operator.get("/api/v1/admin/tenants").status_code == 401
    assert 'name="revoke"' not in panel.get("/operator/tokens").get_data(as_text=True)
    assert audit_rows("token.revoked") == [(None, "charlie@example.com", None)]
    tenant_token = db.session.scalar(select(ApiToken.id).where(ApiToken.kind == "tenant"))
    assert panel.post(f"/operator/tokens/{tenant_token}/revoke").status_code == 404


def test_the_rate_limit_counts_an_operator_tokens_requests(app: Flask, world: World) -> None:
    reconfigure(app, SCHEDULER_API_RATE_LIMIT=2)
    operator = OperatorApi(app)
    assert [operator.get("/api/v1/admin/tenants").status_code for _ in range(3)] == [200, 200, 429]
    limited = operator.get("/api/v1/admin/tenants")
    assert limited.mimetype == "application/problem+json" and "Retry-After" in limited.headers
    assert Api(app, world.alpha, world.alice).get("/api/v1/schedules").status_code == 200


def test_the_tenants_admins_see_the_operators_changes_in_their_audit_log(
    app: Flask, world: World
) -> None:
    operator = OperatorApi(app)
    changed = operator.patch("/api/v1/admin/tenants/alpha", json={"max_running": 3})
    assert changed.status_code == 200
    page = Panel(app, world.alice).get("/audit").get_data(as_text=True)
    assert f"operator token {operator.token.prefix} (provisioning)" in page
    assert "limits_changed" in page or "limits changed" in page
    beta = Panel(app, world.charlie).get("/audit").get_data(as_text=True)
    assert operator.token.prefix not in beta


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_create_that_loses_the_race_for_its_slug_is_a_conflict_not_a_500(
    app: Flask, world: World
) -> None:
    """Two provisioning calls for one slug at once (PostgreSQL: SQLite's write lock serialises
    them): both find the slug free, the other commits first, this one's insert meets the unique
    index. It answers 409 as a later call would, and writes nothing."""
    operator = OperatorApi(app)
    answers: list[TestResponse] = []
    with db.engine.connect() as other:
        other.execute(insert(Tenant).values(slug="acme", name="Theirs", time_zone="UTC"))

        def ask() -> None:
            with app.app_context():
                answers.append(
                    operator.post("/api/v1/admin/tenants", json={"slug": "acme", "name": "Ours"})
                )

        asking = threading.Thread(target=ask)
        asking.start()
        waiting = text(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        deadline = time.monotonic() + 30
        while db.session.scalar(waiting) == 0:  # the request's insert waits on the other's row
            assert time.monotonic() < deadline and asking.is_alive(), answers
            db.session.rollback()
            time.sleep(0.05)
        other.commit()
        asking.join(30)
    assert [a.status_code for a in answers] == [409]
    assert problem_fields(answers[0]) == {"slug": "a tenant with slug 'acme' already exists"}
    db.session.rollback()
    assert db.session.scalars(select(Tenant.name).where(Tenant.slug == "acme")).all() == ["Theirs"]
    assert audit_rows("tenant.created") == []
