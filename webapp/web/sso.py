"""Single sign-on with OpenID Connect (Authlib's Flask client), for the panel's own users.

The login page's "Sign in with ..." button opens `/login/sso`, which sends the browser to the
provider's authorization endpoint (found by discovery, `<issuer>/.well-known/openid-configuration`,
once per process) with a random `state`, a `nonce` and a PKCE challenge (S256), all three kept
in the signed session cookie. The provider sends the browser back to `/login/sso/callback` with
a code; the callback checks the state (Authlib: one use, then it is gone), exchanges the code
with the verifier and the client secret, and checks the ID token: its signature (the provider's
JWKS), issuer (SCHEDULER_OIDC_ISSUER, exactly), audience, expiry and nonce. Only then does the
account side (`services/sso.py`) open its one transaction: every call to the provider happens
before it, never inside one.

The identity provider is the second factor: a single sign-on skips the TOTP step and a tenant's
"require two-factor login for admins" (`auth.complete_login`, told which way the user came).
"""

from __future__ import annotations

from typing import Any

import requests
from authlib.integrations.base_client import MismatchingStateError, OAuthError
from authlib.integrations.flask_client import OAuth
from flask import Blueprint, Flask, current_app, render_template, request, session, url_for
from joserfc.errors import JoseError
from werkzeug.wrappers import Response

from webapp.config import Settings, settings
from webapp.database import utcnow
from webapp.services import sso
from webapp.web.auth import complete_login, is_own_path

bp = Blueprint("sso", __name__)

CLIENT_KEY = "scheduler_oidc_client"
DISCOVERY = "/.well-known/openid-configuration"
SCOPE = "openid email profile"
PROVIDER_TIMEOUT = 10  # seconds for each call to the provider
NEXT_KEY = "sso_next"


def install(app: Flask, chosen: Settings) -> None:
    """With SCHEDULER_OIDC_ISSUER set (create_app calls it then only): the provider's client
    and the two routes (without it, /login/sso answers 404 and the login page shows no
    button)."""
    oauth = OAuth(app)
    app.extensions[CLIENT_KEY] = oauth.register(
        "oidc",
        client_id=chosen.SCHEDULER_OIDC_CLIENT_ID,
        client_secret=chosen.SCHEDULER_OIDC_CLIENT_SECRET,
        server_metadata_url=chosen.SCHEDULER_OIDC_ISSUER.rstrip("/") + DISCOVERY,
        client_kwargs={
            "scope": SCOPE,
            "code_challenge_method": "S256",
            "default_timeout": PROVIDER_TIMEOUT,
        },
    )
    app.register_blueprint(bp)


def client() -> Any:
    return current_app.extensions[CLIENT_KEY]


def refused(message: str, status: int) -> tuple[str, int]:
    """The page of a sign-in that did not happen: what went wrong, and the way back."""
    session.pop(NEXT_KEY, None)
    return render_template(
        "auth/sso_refused.html", message=message, provider=settings().sso_provider
    ), status


def issuer_mismatch() -> str | None:
    """Why the provider's discovery document cannot be trusted, or None. The document must name
    the configured issuer exactly (OpenID Connect Discovery 1.0, 4.3). Fetched once per process
    (Authlib keeps it), outside any transaction."""
    expected = settings().SCHEDULER_OIDC_ISSUER
    found = client().load_server_metadata().get("issuer")
    if found != expected:
        return (
            f"The identity provider at {expected} calls itself {found!r}. Single sign-on is "
            "misconfigured: SCHEDULER_OIDC_ISSUER must be exactly the provider's issuer. Tell "
            "your administrator, or log in with your password."
        )
    return None


UNREACHABLE = (
    "The identity provider cannot be reached right now. Try again in a moment, or log in with "
    "your password."
)


@bp.get("/login/sso")
def start() -> Response | tuple[str, int]:
    """Off to the identity provider, with a new state, nonce and PKCE challenge."""
    try:
        problem = issuer_mismatch()
    except (requests.RequestException, ValueError):  # down, or no JSON
        return refused(UNREACHABLE, 502)
    if problem:
        return refused(problem, 502)
    target = request.args.get("next")
    response: Response = client().authorize_redirect(url_for("sso.callback", _external=True))
    session[NEXT_KEY] = target if is_own_path(target) else None
    return response


@bp.get("/login/sso/callback")
def callback() -> Response | tuple[str, int]:
    """Back from the provider: the checks, then the account and the login. Every refusal is a
    page that says why, and writes nothing."""
    try:
        claims = verified_claims()
    except sso.SignInRefused as refusal:
        return refused(str(refusal), refusal.status)
    issuer = settings().SCHEDULER_OIDC_ISSUER
    try:
        identity = sso.Identity.of(issuer, claims)
        user = sso.account_for(identity, settings().oidc_new_users)
    except sso.SignInRefused as refusal:
        return refused(str(refusal), refusal.status)
    target = session.pop(NEXT_KEY, None)
    return complete_login(user, utcnow(), target, method="sso")


def verified_claims() -> dict[str, Any]:
    """The claims of the ID token the code was exchanged for, checked; the userinfo endpoint's
    too when the token lacks the email (same subject only). All network, no database."""
    oidc = client()
    try:
        if issuer_mismatch():
            raise sso.SignInRefused("Single sign-on is misconfigured: the issuer differs.", 400)
        issuer = settings().SCHEDULER_OIDC_ISSUER
        token = oidc.authorize_access_token(
            claims_options={"iss": {"essential": True, "values": [issuer]}}
        )
        claims = token.get("userinfo")
        if not claims:
            raise sso.SignInRefused("The identity provider sent no ID token.", 400)
        claims = dict(claims)
        if "email" not in claims:
            extra = dict(oidc.userinfo(token=token))
            if extra.get("sub") == claims.get("sub"):
                claims.update(
                    {key: extra[key] for key in ("email", "email_verified") if key in extra}
                )
    except MismatchingStateError:
        raise sso.SignInRefused(
            "This sign-in was not started in this browser, or it was already used. Start it "
            "again from the login page.",
            400,
        ) from None
    except OAuthError as error:  # the provider's answer: access_denied, invalid_grant...
        raise sso.SignInRefused(
            f"The identity provider refused the sign-in ({error.error}). Start it again from "
            "the login page.",
            400,
        ) from None
    except JoseError as error:  # the ID token: its signature, issuer, audience, expiry, nonce
        raise sso.SignInRefused(
            f"The identity provider's answer failed its checks ({error}). Start the sign-in "
            "again from the login page.",
            400,
        ) from None
    except (requests.RequestException, ValueError):
        raise sso.SignInRefused(UNREACHABLE, 502) from None
    return claims
