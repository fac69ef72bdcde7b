"""Device cookies (OWASP, "Slow Down Online Guessing Attacks with Device Cookies"): a browser
that logged in to an account before is a known device of that account and has its own lockout.

At each successful login the browser gets a cookie naming the account and a random device id,
signed with the app's SECRET_KEY (so it cannot be forged, nor moved to another account). When
it comes back with a login for that same account, login_limiter counts its failures against the
device only: guesses spread over many addresses, which lock the account for unknown devices,
do not lock out its owner's browser."""

from __future__ import annotations

import secrets
from datetime import timedelta

from flask import current_app, request
from itsdangerous import BadData, URLSafeTimedSerializer
from werkzeug.wrappers import Response

COOKIE = "device"
MAX_AGE = timedelta(days=365)
SALT = "login-device"


def signer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.secret_key or "", salt=SALT)


def known_device(email: str) -> str | None:
    """The id of the request's device cookie when it is a valid one of this account, else None
    (no cookie, a forged or expired one, or another account's)."""
    value = request.cookies.get(COOKIE)
    if not value:
        return None
    try:
        email_in, device_id = signer().loads(value, max_age=int(MAX_AGE.total_seconds()))
    except (BadData, ValueError, TypeError):
        return None
    if email_in != email or not isinstance(device_id, str):
        return None
    return device_id


def remember_device(response: Response, email: str) -> None:
    """Sets a new device cookie of `email` (after a successful login): HttpOnly, sent to the
    login page only, Secure as the session cookie is."""
    value = signer().dumps([email, secrets.token_urlsafe(16)])
    response.set_cookie(
        COOKIE,
        value,
        max_age=int(MAX_AGE.total_seconds()),
        path="/login",
        secure=bool(current_app.config.get("SESSION_COOKIE_SECURE")),
        httponly=True,
        samesite="Lax",
    )
