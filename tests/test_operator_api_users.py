"""The operator API's users, memberships and tenants' tokens: the command line's services and
messages, audited with the operator token as the actor; on both databases."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select

from tests.api_helpers import Api, OperatorApi, problem_fields
from tests.conftest import PASSWORD, World
from tests.panel_helpers import Panel
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, Membership, User, UserSession
from webapp.services import tokens
from webapp.token_models import ApiToken

MEMBERS = "/api/v1/admin/tenants/alpha/members"


def events() -> list[tuple[str, int | None, str]]:
    rows = db.session.execute(
        select(AuditEvent.action, AuditEvent.tenant_id, AuditEvent.actor_label).order_by(
            AuditEvent.id
        )
    )
    return [(action, tenant, actor) for action, tenant, actor in rows]


def test_an_operator_adds_a_user_sets_the_role_and_removes_them(app: Flask, world: World) -> None:
    operator = OperatorApi(app)
    actor = f"operator token {operator.token.prefix} (provisioning)"
    added = operator.post(
        MEMBERS, json={"email": " Dana@Acme.example ", "role": "admin", "password": PASSWORD}
    )
    assert added.status_code == 201, added.get_json()
    dana = added.get_json()
    assert dana["email"] == "dana@acme.example" and dana["role"] == "admin"
    assert added.headers["Location"] == f"{MEMBERS}/{dana['user_id']}"
    assert operator.get(added.headers["Location"]).get_json() == dana
    again = operator.post(MEMBERS, json={"email": "dana@acme.example", "role": "admin"})
    assert again.status_code == 200  # already a member: nothing new
    listed = operator.get(MEMBERS).get_json()["items"]
    assert [(m["email"], m["role"]) for m in listed] == [
        ("alice@example.com", "admin"),
        ("bob@example.com", "viewer"),
        ("dana@acme.example", "admin"),
    ]
    url = f"{MEMBERS}/{dana['user_id']}"
    tag = {"If-Match": added.headers["ETag"]}
    changed = operator.patch(url, json={"role": "viewer"}, headers=tag)
    assert changed.status_code == 200 and changed.get_json()["role"] == "viewer"
    assert operator.patch(url, json={"role": "admin"}, headers=tag).status_code == 412
    assert operator.delete(url, headers=tag).status_code == 412  # read before the change
    user = operator.get(f"/api/v1/admin/users/{dana['user_id']}").get_json()
    assert user["memberships"] == [{"tenant": "alpha", "role": "viewer"}]
    assert user["two_factor"] is False and user["is_operator"] is False
    found = operator.get("/api/v1/admin/users?email=DANA@acme.example").get_json()["items"]
    assert [u["id"] for u in found] == [dana["user_id"]]
    assert operator.delete(url).status_code == 204
    assert operator.get(url).status_code == 404
    assert db.session.get(User, dana["user_id"]) is not None  # the user stays
    alpha = world.alpha.id
    assert events() == [
        ("token.created", None, "cli"),
        ("user.created", None, actor),
        ("user.added", alpha, actor),
        ("user.role_changed", alpha, actor),
        ("user.removed", alpha, actor),
    ]


def test_revoking_a_users_sessions_signs_them_out(app: Flask, world: World) -> None:
    operator = OperatorApi(app)
    panel = Panel(app, world.bob)
    assert panel.get("/").status_code == 200
    revoked = operator.post(f"/api/v1/admin/users/{world.bob.id}/revoke-sessions")
    assert revoked.status_code == 200
    assert revoked.get_json() == {"user_id": world.bob.id, "sessions_ended": 1}
    assert panel.get("/").status_code == 302  # back to the login page
    assert db.session.scalar(select(func.count()).select_from(UserSession)) == 0
    assert events()[-1] == (
        "user.sessions_revoked",
        None,
        f"operator token {operator.token.prefix} (provisioning)",
    )


def test_bad_member_input_is_refused_by_field_and_nothing_written(
    app: Flask, world: World, cli: FlaskCliRunner
) -> None:
    operator = OperatorApi(app)
    before = len(events())
    cases: list[tuple[dict[str, object], str]] = [
        ({"email": "not-an-email", "role": "admin", "password": PASSWORD}, "email"),
        ({"email": "new@x.example", "role": "owner", "password": PASSWORD}, "role"),
        ({"email": "new@x.example", "role": "admin", "password": "short"}, "password"),
        ({"email": "new@x.example", "role": "admin"}, "password"),  # a new user needs one
        ({"email": "new@x.example", "role": "admin", "password": PASSWORD, "x": 1}, "x"),
    ]
    for data, field in cases:
        refused = operator.post(MEMBERS, json=data)
        assert refused.status_code == 422, (data, refused.get_json())
        assert field in problem_fields(refused), (data, problem_fields(refused))
    # The same words as `flask user create`.
    words = problem_fields(operator.post(MEMBERS, json=cases[3][0]))["password"]
    assert words in cli.invoke(args=["user", "create", "new@x.example", "--tenant", "alpha",
                                     "--role", "admin"]).output  # fmt: skip
    bob = f"{MEMBERS}/{world.bob.id}"
    assert "role" in problem_fields(operator.patch(bob, json={"role": "owner"}))
    charlie = f"{MEMBERS}/{world.charlie.id}"  # beta's, not alpha's
    assert operator.patch(charlie, json={"role": "admin"}).status_code == 404
    assert operator.delete(charlie).status_code == 404
    assert operator.post("/api/v1/admin/users/999/revoke-sessions").status_code == 404
    assert operator.post("/api/v1/admin/tenants/nope/members", json=cases[0][0]).status_code == 404
    assert len(events()) == before
    assert db.session.scalar(select(func.count()).select_from(User)) == 3
    assert (
        db.session.scalar(select(Membership.role).where(Membership.user_id == world.bob.id))
        == "viewer"
    )


def test_an_operator_makes_a_token_for_a_tenant_lists_and_revokes_it(
    app: Flask, world: World
) -> None:
    operator = OperatorApi(app)
    url = "/api/v1/admin/tenants/alpha/tokens"
    created = operator.post(url, json={"name": "Deploys", "scope": "write", "expires_in": 30})
    assert created.status_code == 201, created.get_json()
    assert created.headers["Cache-Control"] == "no-store"
    token = created.get_json()
    assert token["kind"] == "tenant" and token["state"] == "active"
    assert token["created_by"] == f"operator token {operator.token.prefix} (provisioning)"
    # The secret works as the tenant's token, and only the tenant's.
    found = tokens.authenticate(token["secret"], utcnow())
    assert found is not None and found.tenant_id == world.alpha.id
    as_tenant = app.test_client().get(
        "/api/v1/schedules", headers={"Authorization": f"Bearer {token['secret']}"}
    )
    assert as_tenant.status_code == 200
    listed = operator.get(url).get_json()["items"]
    assert [t["prefix"] for t in listed] == [token["prefix"]]
    assert "secret" not in listed[0]
    assert operator.get("/api/v1/admin/tenants/beta/tokens").get_json()["items"] == []
    assert (
        operator.post(f"/api/v1/admin/tenants/beta/tokens/{token['id']}/revoke").status_code == 404
    )
    revoked = operator.post(f"{url}/{token['id']}/revoke")
    assert revoked.status_code == 200 and revoked.get_json()["state"] == "revoked"
    assert tokens.authenticate(token["secret"], utcnow()) is None
    token_events = [e for e in events() if e[0].startswith("token.") and e[1] is not None]
    assert token_events == [
        ("token.created", world.alpha.id, token["created_by"]),
        ("token.revoked", world.alpha.id, token["created_by"]),
    ]


def test_bad_token_input_is_refused_and_no_token_made(app: Flask, world: World) -> None:
    operator = OperatorApi(app)
    url = "/api/v1/admin/tenants/alpha/tokens"
    cases: list[tuple[dict[str, object], str]] = [
        ({"name": "", "scope": "read"}, "name"),
        ({"name": "x", "scope": "admin"}, "scope"),
        ({"name": "x", "scope": "read", "expires_in": 0}, "expires_in"),
        ({"name": "x"}, "scope"),
    ]
    for data, field in cases:
        refused = operator.post(url, json=data)
        assert refused.status_code == 422, (data, refused.get_json())
        assert field in problem_fields(refused)
    keyed = operator.post(
        url, json={"name": "x", "scope": "read"}, headers={"Idempotency-Key": "k"}
    )
    assert keyed.status_code == 400 and "Idempotency-Key" in problem_fields(keyed)
    tenant_tokens = select(func.count()).select_from(ApiToken).where(ApiToken.kind == "tenant")
    assert db.session.scalar(tenant_tokens) == 0


def test_a_tenant_token_is_refused_on_every_operator_endpoint(app: Flask, world: World) -> None:
    tenant = Api(app, world.alpha, world.alice)
    before = len(events())
    for method, url in [
        ("get", MEMBERS),
        ("post", MEMBERS),
        ("post", "/api/v1/admin/tenants"),
        ("delete", "/api/v1/admin/tenants/alpha?cascade=true"),
        ("post", "/api/v1/admin/tenants/alpha/tokens"),
        ("post", f"/api/v1/admin/users/{world.bob.id}/revoke-sessions"),
    ]:
        refused = getattr(tenant, method)(url)
        assert refused.status_code == 403, (method, url)
        assert refused.mimetype == "application/problem+json"
        none = getattr(app.test_client(), method)(url)
        assert none.status_code == 401, (method, url)
    assert len(events()) == before
