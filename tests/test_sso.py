"""Single sign-on with OpenID Connect, against a real provider (tests/oidc_support.py): a
sign-in end to end, the users it may create, the exemption from two-factor login, and the
attacks an OIDC client must refuse (a wrong state, a replayed code, an unverified email, an
issuer that does not match, a code from a second provider), each with a clear page, a 4xx and
nothing written."""

from __future__ import annotations

import base64
import hashlib
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from werkzeug.test import TestResponse

from tests.conftest import PASSWORD, RequestIsolatedClient, World, migrated_app
from tests.oidc_support import Provider, oidc_provider, path_and_query, query_of
from tests.panel_helpers import Panel, log_in
from tests.pg_bouncer import pooler_settings
from tests.two_factor_helpers import enrol
from webapp import SettingsRefused, create_app
from webapp.extensions import db
from webapp.models import AuditEvent, Membership, User, UserSession

CALLBACK = "http://localhost/login/sso/callback"  # the test client's host
COMPLETE = {
    "SCHEDULER_OIDC_ISSUER": "https://id.example",
    "SCHEDULER_OIDC_CLIENT_ID": "scheduler",
    "SCHEDULER_OIDC_CLIENT_SECRET": "secret",
}


@pytest.fixture
def provider() -> Iterator[Provider]:
    with oidc_provider() as started:
        yield started


def sso_app(database_url: str, provider: Provider, **config: object) -> Flask:
    client_id, secret = provider.register_client(CALLBACK)
    settings = {
        "SCHEDULER_OIDC_ISSUER": provider.url,
        "SCHEDULER_OIDC_CLIENT_ID": client_id,
        "SCHEDULER_OIDC_CLIENT_SECRET": secret,
        "SCHEDULER_OIDC_NAME": "Example ID",
        **pooler_settings(database_url),
        **config,
    }
    application = migrated_app(database_url, **settings)
    application.test_client_class = RequestIsolatedClient
    return application


@contextmanager
def serving(application: Flask) -> Iterator[Flask]:
    with application.app_context():
        yield application
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def sso_settings() -> dict[str, str]:
    """More settings for `app` (a test parametrizes this name to give them)."""
    return {}


@pytest.fixture
def app(database_url: str, provider: Provider, sso_settings: dict[str, str]) -> Iterator[Flask]:
    """The panel with single sign-on through `provider` (overrides conftest's `app`)."""
    with serving(sso_app(database_url, provider, **sso_settings)) as application:
        yield application


def start(client: FlaskClient) -> str:
    """The login page's button: where it sends the browser (the provider's form)."""
    started = client.get("/login/sso")
    assert started.status_code == 302, started.get_data(as_text=True)
    return str(started.headers["Location"])


def sign_in(client: FlaskClient, provider: Provider, sub: str) -> TestResponse:
    """The whole sign-in: the button, the provider's form for `sub`, back to the callback."""
    back = provider.authorize(start(client), sub)
    return client.get(path_and_query(back))


def written() -> tuple[int, int, int, int]:
    """What a refused sign-in must leave as it was: users, memberships, logins, audit rows."""
    db.session.expire_all()
    return tuple(  # type: ignore[return-value]
        db.session.scalar(select(func.count()).select_from(table))
        for table in (User, Membership, UserSession, AuditEvent)
    )


def logged_in(client: FlaskClient) -> bool:
    return client.get("/").status_code == 200


def refused(answer: TestResponse, status: int, words: str) -> None:
    text = answer.get_data(as_text=True)
    assert answer.status_code == status, text
    assert "Sign-in with Example ID failed" in text and words in text, text


def test_the_login_page_offers_it_and_a_verified_email_signs_in(
    app: Flask, world: World, provider: Provider
) -> None:
    client = app.test_client()
    page = client.get("/login").get_data(as_text=True)
    assert "Sign in with Example ID" in page
    provider.user("alice-at-idp", email="Alice@Example.com", email_verified=True)
    authorization = start(client)
    asked = query_of(authorization)
    assert asked["code_challenge_method"] == "S256" and asked["nonce"] and asked["state"]
    assert set(asked["scope"].split()) == {"openid", "email", "profile"}
    done = client.get(path_and_query(provider.authorize(authorization, "alice-at-idp")))
    assert done.status_code == 303 and done.headers["Location"] == "/"
    assert logged_in(client)
    # PKCE: the verifier sent with the code is the one whose S256 the challenge was.
    (token_request,) = provider.requests_to("/oauth2/token")
    verifier = token_request.params["code_verifier"]
    digest = hashlib.sha256(verifier.encode()).digest()
    assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == asked["code_challenge"]
    signed_in = db.session.execute(
        select(AuditEvent.tenant_id, AuditEvent.actor_label, AuditEvent.after).where(
            AuditEvent.action == "user.signed_in"
        )
    ).all()
    assert signed_in == [
        (
            world.alpha.id,
            "alice@example.com",
            {"method": "single sign-on", "issuer": provider.url, "subject": "alice-at-idp"},
        )
    ]
    log = Panel(app, world.alice).get("/audit").get_data(as_text=True)
    assert "signed in" in log and "alice-at-idp" in log and provider.url in log


def test_no_button_without_the_settings(database_url: str) -> None:
    with serving(migrated_app(database_url, **pooler_settings(database_url))) as plain:
        client = plain.test_client()
        assert "Sign in with" not in client.get("/login").get_data(as_text=True)
        assert client.get("/login/sso").status_code == 404


def test_next_is_kept_through_the_provider(app: Flask, world: World, provider: Provider) -> None:
    provider.user("bob", email="bob@example.com", email_verified=True)
    client = app.test_client()
    started = client.get("/login/sso?next=/runs")
    done = client.get(path_and_query(provider.authorize(started.headers["Location"], "bob")))
    assert done.status_code == 303 and done.headers["Location"] == "/runs"
    # Another host is never a target.
    started = app.test_client().get("/login/sso?next=//evil.example/")
    assert started.status_code == 302


def test_it_skips_the_second_factor_and_the_tenants_requirement(
    app: Flask, world: World, provider: Provider
) -> None:
    """The identity provider is the factor: no code step, no enrolment for the admin of a
    tenant that requires two-factor login, while her password login still asks for both."""
    alice = Panel(app, world.alice)
    saved = alice.post("/settings/two-factor", {"require_two_factor_admins": "on"}, htmx=False)
    assert saved.status_code == 303
    enrolled = enrol(alice)
    password_login = log_in(app.test_client(), "alice@example.com")
    assert password_login.headers["Location"].endswith("/login/two-factor")
    provider.user("alice", email="alice@example.com", email_verified=True)
    client = app.test_client()
    assert sign_in(client, provider, "alice").headers["Location"] == "/"
    assert client.get("/runs").status_code == 200
    # An admin without a second factor is not sent to set one up either.
    Panel(app, world.charlie).post(
        "/settings/two-factor", {"require_two_factor_admins": "on"}, htmx=False
    )
    provider.user("charlie", email="charlie@example.com", email_verified=True)
    charlie = app.test_client()
    assert sign_in(charlie, provider, "charlie").headers["Location"] == "/"
    assert charlie.get("/runs").status_code == 200
    assert enrolled.secret  # her second factor stays on for password logins


def test_an_unknown_email_is_refused_and_nothing_is_written(
    app: Flask, world: World, provider: Provider
) -> None:
    provider.user("dora", email="dora@example.com", email_verified=True)
    before = written()
    client = app.test_client()
    refused(sign_in(client, provider, "dora"), 403, "There is no account for dora@example.com")
    assert written() == before and not logged_in(client)


def test_an_unverified_email_is_refused(app: Flask, world: World, provider: Provider) -> None:
    provider.user("alice", email="alice@example.com", email_verified=False)
    provider.user("alice2", email="alice@example.com")  # no email_verified at all
    before = written()
    for sub in ("alice", "alice2"):
        client = app.test_client()
        answer = sign_in(client, provider, sub)
        refused(answer, 403, "has not verified the email address alice@example.com")
        assert not logged_in(client)
    assert written() == before


def test_a_wrong_state_is_refused(app: Flask, world: World, provider: Provider) -> None:
    provider.user("alice", email="alice@example.com", email_verified=True)
    client = app.test_client()
    back = provider.authorize(start(client), "alice")
    before = written()
    forged = back.replace("state=", "state=x")
    refused(client.get(path_and_query(forged)), 400, "was not started in this browser")
    # A callback in a browser that never started a sign-in (login CSRF) is refused alike.
    other = app.test_client()
    refused(other.get(path_and_query(back)), 400, "was not started in this browser")
    assert written() == before and not logged_in(client) and not logged_in(other)


def test_a_replayed_code_is_refused(app: Flask, world: World, provider: Provider) -> None:
    provider.user("alice", email="alice@example.com", email_verified=True)
    first = app.test_client()
    back = provider.authorize(start(first), "alice")
    assert first.get(path_and_query(back)).status_code == 303
    before = written()
    # The same callback again: its state was used up.
    refused(first.get(path_and_query(back)), 400, "already used")
    # The code with a state of a new sign-in: the provider refuses the used code.
    thief = app.test_client()
    state = query_of(start(thief))["state"]
    replay = path_and_query(back).replace(f"state={query_of(back)['state']}", f"state={state}")
    refused(thief.get(replay), 400, "refused the sign-in (invalid_grant)")
    assert written() == before and not logged_in(thief)


def test_an_id_token_from_another_issuer_is_refused(
    app: Flask, world: World, provider: Provider
) -> None:
    provider.user("alice", email="alice@example.com", email_verified=True)
    # It signs its ID tokens as http://127.0.0.1:PORT, not as the configured localhost.
    provider.token_host = provider.url.replace("http://localhost", "127.0.0.1")
    before = written()
    client = app.test_client()
    refused(sign_in(client, provider, "alice"), 400, "failed its checks (invalid_claim")
    assert written() == before and not logged_in(client)


def test_a_code_from_a_second_provider_is_refused(
    app: Flask, world: World, provider: Provider
) -> None:
    """Mix-up: the browser is sent to another provider with this sign-in's parameters, and
    comes back with that provider's code: it is exchanged at the configured provider only,
    which never issued it."""
    with oidc_provider(require_client_registration=False) as second:
        second.user("alice", email="alice@example.com", email_verified=True)
        authorization = start(client := app.test_client())
        elsewhere = authorization.replace(provider.url, second.url)
        back = second.authorize(elsewhere, "alice")
    before = written()
    refused(client.get(path_and_query(back)), 400, "invalid_grant")
    assert written() == before and not logged_in(client)


def test_a_misconfigured_issuer_is_refused_before_the_provider(
    database_url: str, provider: Provider
) -> None:
    """Discovery must name the configured issuer exactly: one with a trailing slash does not
    match the provider's own, and the button says so instead of sending anyone there."""
    misconfigured = sso_app(database_url, provider, SCHEDULER_OIDC_ISSUER=provider.url + "/")
    with serving(misconfigured) as application:
        before = written()
        answer = application.test_client().get("/login/sso")
        refused(answer, 502, f"calls itself &#39;{provider.url}&#39;")
        assert written() == before


def test_an_unreachable_provider_is_a_clear_page(database_url: str) -> None:
    with oidc_provider() as gone:
        stranded = sso_app(database_url, gone)
    with serving(stranded) as application:
        answer = application.test_client().get("/login/sso")
        refused(answer, 502, "cannot be reached right now")


def dora_at_the_provider(provider: Provider) -> None:
    """Dora, whom the panel has no account for, signs in at the provider."""
    provider.user("dora", email="dora@example.com", email_verified=True)


@pytest.mark.parametrize("sso_settings", [{"SCHEDULER_OIDC_CREATE_USERS": "alpha:viewer"}])
def test_create_users_makes_a_member_without_a_password(
    app: Flask, provider: Provider, world: World
) -> None:
    dora_at_the_provider(provider)
    client = app.test_client()
    assert sign_in(client, provider, "dora").status_code == 303 and logged_in(client)
    dora = db.session.scalar(select(User).where(User.email == "dora@example.com"))
    assert dora is not None
    assert [(m.tenant_id, m.role) for m in dora.memberships] == [(world.alpha.id, "viewer")]
    rows = db.session.execute(
        select(AuditEvent.action, AuditEvent.tenant_id, AuditEvent.actor_label)
        .where(AuditEvent.object_id == dora.id, AuditEvent.object_type == "user")
        .order_by(AuditEvent.id)
    ).all()
    assert rows == [
        ("user.created", None, "single sign-on"),
        ("user.added", world.alpha.id, "single sign-on"),
        ("user.signed_in", world.alpha.id, "dora@example.com"),
    ]
    # No password is hers until one is set: none logs her in, and no code can be set up.
    for password in (PASSWORD, "!"):
        tried = app.test_client()
        assert log_in(tried, "dora@example.com", password).status_code == 401
        assert not logged_in(tried)
    setup = Panel(app, dora).post("/account/two-factor/setup", htmx=False)
    assert setup.status_code == 409
    assert "you sign in with single sign-on" in setup.get_data(as_text=True)
    # A second sign-in finds her; no second user.
    assert sign_in(app.test_client(), provider, "dora").status_code == 303
    assert db.session.scalar(select(func.count()).select_from(User)) == 4


@pytest.mark.parametrize("sso_settings", [{"SCHEDULER_OIDC_CREATE_USERS": "gamma:admin"}])
def test_create_users_naming_a_missing_tenant_writes_nothing(
    app: Flask, provider: Provider, world: World
) -> None:
    dora_at_the_provider(provider)
    before = written()
    answer = sign_in(app.test_client(), provider, "dora")
    refused(answer, 409, "(&#39;gamma&#39;, SCHEDULER_OIDC_CREATE_USERS) does not exist")
    assert written() == before


def test_no_transaction_is_open_while_the_provider_is_asked(
    app: Flask, world: World, provider: Provider, database_url: str
) -> None:
    """The code's exchange waits for the provider: no database transaction may be open
    meanwhile (a slow provider would hold its locks and a pooled connection)."""
    seen: list[int] = []

    def open_transactions() -> None:
        url = make_url(database_url)
        if url.get_backend_name() == "sqlite":
            lite = sqlite3.connect(str(url.database), timeout=0)
            try:
                lite.execute("BEGIN IMMEDIATE")  # fails while another writer holds it
                lite.rollback()
                seen.append(0)
            except sqlite3.OperationalError:
                seen.append(1)
            finally:
                lite.close()
            return
        conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(conninfo, autocommit=True) as connection:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
            ).fetchone()
            seen.append(int(row[0]) if row else -1)

    provider.on_token_request = open_transactions
    provider.user("alice", email="alice@example.com", email_verified=True)
    assert sign_in(app.test_client(), provider, "alice").status_code == 303
    assert seen == [0]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"SCHEDULER_OIDC_ISSUER": "https://id.example"},
            "SCHEDULER_OIDC_CLIENT_ID and SCHEDULER_OIDC_CLIENT_SECRET not set",
        ),
        (
            {**COMPLETE, "SCHEDULER_OIDC_ISSUER": "http://id.example"},
            "must be an https:// URL (http:// only for localhost)",
        ),
        (
            {**COMPLETE, "SCHEDULER_OIDC_CREATE_USERS": "acme:owner"},
            "SCHEDULER_OIDC_CREATE_USERS='acme:owner' must be TENANT:ROLE",
        ),
        ({"SCHEDULER_OIDC_CREATE_USERS": "acme:viewer"}, "needs SCHEDULER_OIDC_ISSUER"),
    ],
)
def test_settings_are_checked_at_start(given: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsRefused, match=re.escape(message)):
        create_app({"TESTING": True, **given})
