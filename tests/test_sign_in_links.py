"""One-time sign-in links, opened in the panel: the page before Continue, the sign-in with the
user and membership made just in time, and every link that must be refused (used, expired,
changed, for another tenant, for a member removed since, for an operator) with a clear page, a
4xx and nothing written."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from werkzeug.test import TestResponse

from tests.conftest import PASSWORD, World
from tests.panel_helpers import Panel, log_in, token_in
from tests.settings_support import reconfigure
from webapp.config import settings
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import AuditEvent, Membership, Tenant, User, UserSession
from webapp.services import sign_in_links
from webapp.services.account_schema import AccountError
from webapp.services.accounts import NO_PASSWORD, add_user, remove_member, set_operator
from webapp.services.audit import Actor
from webapp.sign_in_models import SignInLink

MAKER = Actor(user_id=None, label="token op_1234 (host app)")


def make_link(app: Flask, email: str = "dora@example.com", role: str = "admin", **more: Any) -> str:
    """A link's path, made as the operator API makes one (`more`: tenant, return_url, now)."""
    now = more.pop("now", None) or utcnow()
    data = {"tenant": "alpha", "email": email, "role": role, **more}
    made = sign_in_links.create_link(data, MAKER, now, settings(app))
    return f"/sign-in/{data['tenant']}/{made.token}"


def open_link(client: FlaskClient, path: str) -> TestResponse:
    """Opens the link and presses Continue, as a person does."""
    page = client.get(path)
    assert page.status_code == 200, page.get_data(as_text=True)
    return client.post(path, data={"csrf_token": token_in(page, "meta")})


def written() -> tuple[int, ...]:
    """What a refused link must leave as it was: users, memberships, audit rows, logins, and
    the links used."""
    used = select(func.count()).select_from(SignInLink).where(SignInLink.used_at.is_not(None))
    counts = [
        db.session.scalar(select(func.count()).select_from(table))
        for table in (User, Membership, AuditEvent, UserSession)
    ]
    return (*[count or 0 for count in counts], db.session.scalar(used) or 0)


def tenant_actions(tenant: Tenant) -> list[str]:
    rows = select(AuditEvent.action).where(AuditEvent.tenant_id == tenant.id)
    return list(db.session.scalars(rows.order_by(AuditEvent.id)))


def dora() -> User | None:
    return db.session.scalar(select(User).where(User.email == "dora@example.com"))


def test_a_link_signs_a_new_person_in_with_the_role_given(app: Flask, world: World) -> None:
    path = make_link(app, "Dora@Example.com", "admin")
    client = app.test_client()
    page = client.get(path)
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "Sign in to Alpha Corp" in text and "dora@example.com" in text
    assert dora() is None  # the page alone makes nothing
    signed_in = client.post(path, data={"csrf_token": token_in(page, "meta")})
    assert signed_in.status_code == 303 and signed_in.headers["Location"] == "/"
    panel = client.get("/").get_data(as_text=True)
    assert "Alpha Corp" in panel and "dora@example.com" in panel
    assert 'href="/schedules/new"' in panel  # an admin's page
    user = dora()
    assert user is not None and user.last_login_at is not None
    assert [m.role for m in user.memberships] == ["admin"]
    assert tenant_actions(world.alpha)[-2:] == ["user.added", "user.signed_in_by_link"]
    event = db.session.scalar(
        select(AuditEvent).where(AuditEvent.action == "user.signed_in_by_link")
    )
    assert event is not None and event.actor_label == "dora@example.com"
    assert event.after == {"role": "admin", "link_by": MAKER.label, "user_created": True}
    log = Panel(app, world.alice).get("/audit").get_data(as_text=True)
    assert "signed in by link" in log and MAKER.label in log, log


def test_a_user_made_by_a_link_cannot_log_in_with_a_password_until_one_is_set(
    app: Flask, world: World
) -> None:
    open_link(app.test_client(), make_link(app, role="viewer"))
    user = dora()
    assert user is not None and user.password_hash == NO_PASSWORD
    for password in (PASSWORD, "x" * 10):
        refused = log_in(app.test_client(), "dora@example.com", password)
        assert refused.status_code == 401
        assert "Wrong email or password." in refused.get_data(as_text=True)
    add_user("dora@example.com", "alpha", "viewer", PASSWORD)
    assert log_in(app.test_client(), "dora@example.com", PASSWORD).status_code == 303


def test_an_existing_member_gets_the_role_the_link_names(app: Flask, world: World) -> None:
    client = app.test_client()
    open_link(client, make_link(app, "bob@example.com", "admin"))
    bob = db.session.get(User, world.bob.id)
    assert bob is not None and [m.role for m in bob.memberships] == ["admin"]
    changed = db.session.scalar(select(AuditEvent).where(AuditEvent.action == "user.role_changed"))
    assert changed is not None and changed.tenant_id == world.alpha.id
    assert (changed.before, changed.after) == ({"role": "viewer"}, {"role": "admin"})
    assert changed.actor_label == f"sign-in link by {MAKER.label}"
    assert bob.password_hash == world.bob.password_hash  # the password stays


def test_the_page_before_continue_uses_nothing(app: Flask, world: World) -> None:
    path = make_link(app)
    before = written()
    for _ in range(3):  # a mail scanner, a chat preview, the person
        assert app.test_client().get(path).status_code == 200
    assert written() == before
    assert open_link(app.test_client(), path).status_code == 303


def test_continue_needs_the_pages_csrf_token(app: Flask, world: World) -> None:
    path = make_link(app)
    client = app.test_client()
    client.get(path)
    before = written()
    refused = client.post(path, data={})
    assert refused.status_code == 400
    assert written() == before
    assert open_link(client, path).status_code == 303  # the link still works


def assert_refused(client: FlaskClient, path: str, status: int, words: str) -> None:
    """The link answers a clear page with `status` on opening and on Continue, and writes
    nothing."""
    before = written()
    page = client.get(path)
    assert page.status_code == status
    assert words in page.get_data(as_text=True)
    assert 'name="continue"' not in page.get_data(as_text=True)
    token = token_in(client.get("/login"))
    posted = client.post(path, data={"csrf_token": token})
    assert posted.status_code == status and words in posted.get_data(as_text=True)
    assert written() == before


def test_a_link_works_once(app: Flask, world: World) -> None:
    path = make_link(app)
    assert open_link(app.test_client(), path).status_code == 303
    assert_refused(app.test_client(), path, 410, "This sign-in link was already used")


def test_an_expired_link_is_refused(app: Flask, world: World) -> None:
    ttl = settings(app).SCHEDULER_SIGN_IN_LINK_TTL
    assert ttl == 60
    path = make_link(app, now=utcnow() - timedelta(seconds=ttl + 1))
    assert_refused(app.test_client(), path, 410, "This sign-in link has expired")
    assert dora() is None


def test_a_link_that_lasts_longer_when_the_setting_says_so(app: Flask, world: World) -> None:
    reconfigure(app, SCHEDULER_SIGN_IN_LINK_TTL=600)
    path = make_link(app, now=utcnow() - timedelta(seconds=500))
    assert open_link(app.test_client(), path).status_code == 303


def changed_paths(path: str) -> list[str]:
    """The link with its token changed (a character, cut short, made longer) and its tenant."""
    _, _, slug, token = path.split("/")
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    return [
        f"/sign-in/{slug}/{flipped}",
        f"/sign-in/{slug}/{token[:-5]}",
        f"/sign-in/{slug}/{token}x",
        f"/sign-in/{slug}/{token.upper()}",
        f"/sign-in/beta/{token}",  # another tenant's address
        f"/sign-in/nosuchtenant/{token}",
    ]


def test_a_changed_link_is_refused(app: Flask, world: World) -> None:
    path = make_link(app)
    for changed in changed_paths(path):
        assert_refused(app.test_client(), changed, 404, "This sign-in link is not valid")
    assert open_link(app.test_client(), path).status_code == 303  # the real one still works


def test_a_link_for_a_member_removed_since_is_refused(app: Flask, world: World) -> None:
    path = make_link(app, "bob@example.com", "viewer")
    remove_member("bob@example.com", "alpha")
    assert_refused(app.test_client(), path, 403, "You are no longer a member of Alpha Corp")
    bob = db.session.get(User, world.bob.id)
    assert bob is not None and bob.memberships == []


def test_a_link_never_signs_in_an_operator(app: Flask, world: World) -> None:
    set_operator("alice@example.com", True, Actor.cli())
    with pytest.raises(AccountError) as refused:
        make_link(app, "alice@example.com")
    assert refused.value.errors == {
        "email": "alice@example.com is an operator: a link cannot sign in one"
    }
    path = make_link(app, "bob@example.com", "viewer")
    set_operator("bob@example.com", True, Actor.cli())  # made an operator since
    assert_refused(app.test_client(), path, 403, "This link cannot sign in an operator")


@pytest.mark.parametrize(
    ("return_url", "message"),
    [
        ("javascript:alert(1)", "must be an absolute http or https URL"),
        ("//evil.example/x", "must be an absolute http or https URL"),
        ("/settings", "must be an absolute http or https URL"),
        ("https://evil.example/", "host evil.example is not in SCHEDULER_RETURN_URL_HOSTS"),
        ("https://app.example.com.evil.example/", "is not in SCHEDULER_RETURN_URL_HOSTS"),
        ("https://app.example.com@evil.example/", "must not contain a user name or password"),
        ("https://evil.example\\@app.example.com/", "must not contain spaces"),
        ("https://app.example.com/\nLocation: x", "must not contain spaces"),
        ("https://[app.example.com/", "is not a valid URL"),
        ("https://app.example.com/" + "a" * 2000, "must be at most 2000 characters"),
    ],
)
def test_a_return_url_off_the_allowed_hosts_is_refused(
    app: Flask, world: World, return_url: str, message: str
) -> None:
    reconfigure(app, SCHEDULER_RETURN_URL_HOSTS=["app.example.com"])
    before = written()
    with pytest.raises(AccountError) as refused:
        make_link(app, return_url=return_url)
    assert list(refused.value.errors) == ["return_url"]
    assert message in refused.value.errors["return_url"]
    assert written() == before
    assert db.session.scalar(select(func.count()).select_from(SignInLink)) == 0


def test_no_return_url_is_allowed_until_hosts_are_named(app: Flask, world: World) -> None:
    with pytest.raises(AccountError) as refused:
        make_link(app, return_url="https://app.example.com/")
    assert refused.value.errors == {
        "return_url": "is not allowed: SCHEDULER_RETURN_URL_HOSTS names no host"
    }


def test_the_header_leads_back_to_the_return_urls_host(app: Flask, world: World) -> None:
    reconfigure(app, SCHEDULER_RETURN_URL_HOSTS=["App.Example.com"])
    client = app.test_client()
    open_link(client, make_link(app, return_url="https://app.example.com:8443/account?x=1&y=2"))
    for url in ("/", "/runs", "/audit"):
        page = client.get(url).get_data(as_text=True)
        assert (
            '<a class="back-to" href="https://app.example.com:8443/account?x=1&amp;y=2" '
            'target="_top">Back to app.example.com:8443</a>'
        ) in page
    password_client = app.test_client()
    log_in(password_client, "alice@example.com")
    assert "Back to" not in password_client.get("/").get_data(as_text=True)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"tenant": "nosuch"}, "tenant"),
        ({"email": "not-an-email"}, "email"),
        ({"role": "owner"}, "role"),
        ({"tenant": 7}, "tenant"),
        ({"nonsense": 1}, "nonsense"),
    ],
)
def test_bad_input_names_its_field_and_makes_no_link(
    app: Flask, world: World, data: dict[str, Any], field: str
) -> None:
    asked = {"tenant": "alpha", "email": "dora@example.com", "role": "admin", **data}
    with pytest.raises(AccountError) as refused:
        sign_in_links.create_link(asked, MAKER, utcnow(), settings(app))
    assert field in refused.value.errors
    assert db.session.scalar(select(func.count()).select_from(SignInLink)) == 0


def test_a_link_opened_while_signed_in_as_someone_else_signs_that_login_out(
    app: Flask, world: World
) -> None:
    panel = Panel(app, world.alice)
    client = panel.client
    path = make_link(app)
    page = client.get(path).get_data(as_text=True)
    assert "You are logged in as <strong>alice@example.com</strong>" in page
    alice_sessions = select(func.count()).where(UserSession.user_id == world.alice.id)
    assert db.session.scalar(alice_sessions) == 1
    assert client.post(path, data={"csrf_token": token_in(page, "meta")}).status_code == 303
    assert "dora@example.com" in client.get("/").get_data(as_text=True)
    assert db.session.scalar(alice_sessions) == 0  # ended on the server, not only forgotten


def test_a_login_by_link_is_not_sent_to_two_factor_enrolment(app: Flask, world: World) -> None:
    alpha = db.session.get(Tenant, world.alpha.id)
    assert alpha is not None
    alpha.require_two_factor_admins = True
    db.session.commit()
    by_password = app.test_client()
    log_in(by_password, "alice@example.com")
    assert by_password.get("/").headers.get("Location", "").endswith("/account/two-factor")
    by_link = app.test_client()
    open_link(by_link, make_link(app, "alice@example.com", "admin"))
    assert by_link.get("/").status_code == 200
    assert by_link.get("/runs").status_code == 200


def test_the_link_stores_only_the_hash_of_its_token(app: Flask, world: World) -> None:
    path = make_link(app)
    token = path.rsplit("/", 1)[1]
    assert len(token) >= 43  # 32 random bytes
    stored = db.session.scalars(select(SignInLink)).one()
    assert token not in (stored.token_hash, stored.email, stored.created_by_label)
    granted = (stored.tenant_id, stored.email, stored.role)
    assert granted == (world.alpha.id, "dora@example.com", "admin")


def test_a_link_continued_twice_at_once_signs_in_once(app: Flask, world: World) -> None:
    path = make_link(app)
    clients = [app.test_client(), app.test_client()]
    tokens = [token_in(client.get(path), "meta") for client in clients]
    start = threading.Barrier(2)
    statuses: list[int] = []

    def go(client: FlaskClient, token: str) -> None:
        with app.app_context():
            start.wait()
            statuses.append(client.post(path, data={"csrf_token": token}).status_code)

    threads = [threading.Thread(target=go, args=pair) for pair in zip(clients, tokens, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [303, 410]
    user = dora()
    assert user is not None
    assert db.session.scalar(select(func.count()).where(UserSession.user_id == user.id)) == 1
    assert tenant_actions(world.alpha).count("user.signed_in_by_link") == 1


def test_a_user_without_a_password_is_not_offered_two_factor_login(
    app: Flask, world: World
) -> None:
    client = app.test_client()
    open_link(client, make_link(app))
    page = client.get("/account/two-factor")
    refused = client.post("/account/two-factor/setup", data={"csrf_token": token_in(page, "meta")})
    assert refused.status_code == 409
    assert "You have no password to protect" in refused.get_data(as_text=True)
    user = dora()
    assert user is not None and user.totp_secret is None


def test_links_spent_a_day_ago_are_deleted_when_the_next_is_made(app: Flask, world: World) -> None:
    make_link(app, now=utcnow() - timedelta(days=1, minutes=2))
    make_link(app, now=utcnow() - timedelta(hours=23))  # expired, kept: opening it says so
    make_link(app)
    assert db.session.scalar(select(func.count()).select_from(SignInLink)) == 2
