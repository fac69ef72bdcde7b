"""The account's two-factor login page (from the account menu): set it up with a QR code,
confirm with a code, see the recovery codes once, turn it off with the password and a code.

A tenant that requires two-factor login of its admins sends an admin without it here from every
page of the panel until it is on (the login does the same right after the password)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, redirect, render_template, request, url_for
from flask_login import current_user, login_required
from werkzeug.wrappers import Response

from webapp.database import utcnow
from webapp.models import User
from webapp.services import two_factor
from webapp.web import login_limiter
from webapp.web.auth import must_enrol_now
from webapp.web.common import htmx_redirect

bp = Blueprint("two_factor", __name__, url_prefix="/account/two-factor")
bp.before_request(login_required(lambda: None))

# Where an admin who must enrol may still go: this page, logging in and out (single sign-on
# and a sign-in link too), and what is no page.
OPEN_BLUEPRINTS = {"two_factor", "auth", "sso", "sign_in", "api", "health", "metrics"}


@bp.before_app_request
def send_admins_to_enrolment() -> Response | None:
    """An admin whose tenant requires two-factor login goes to enrolment until it is on; not
    after a sign-in by link, whose host is the factor."""
    if request.blueprint in OPEN_BLUEPRINTS or request.endpoint in (None, "static"):
        return None
    if current_user.is_authenticated and must_enrol_now(me()):
        return redirect(url_for("two_factor.index"), 303)
    return None


def me() -> User:
    user: User = current_user._get_current_object()
    return user


def page(template: str, status: int = 200, **context: Any) -> tuple[str, int]:
    user = me()
    context.setdefault("errors", {})
    return render_template(
        template,
        enabled=two_factor.is_enabled(user),
        required=must_enrol_now(user),
        user=user,
        **context,
    ), status


@bp.get("")
def index() -> tuple[str, int]:
    """Whether two-factor login is on, and the way to set it up or turn it off."""
    user = me()
    left = two_factor.codes_left(user) if two_factor.is_enabled(user) else None
    return page("account/two_factor.html", codes_left=left)


@bp.post("/setup")
def setup() -> tuple[str, int]:
    """A new secret, shown once as a QR code and as text; it is on once a code confirms it."""
    try:
        enrolment = two_factor.start_enrolment(me())
    except two_factor.TwoFactorError as error:
        return page("account/two_factor.html", 409, errors={error.field: str(error)})
    return page("account/two_factor_setup.html", enrolment=enrolment)


Answer = tuple[str, int] | tuple[str, int, dict[str, str]] | Response


def counted() -> login_limiter.Attempt:
    """A code (or password) typed here is counted by the login limiter as one typed at the
    login, before it is checked: a stolen session must not guess the password, nor anyone the
    code, faster here than there."""
    user = me()
    subjects = login_limiter.Subjects.of(
        request.remote_addr, user.email, second_factor=two_factor.is_enabled(user)
    )
    return login_limiter.Attempt(subjects, login_limiter.admit(subjects, utcnow()))


def setup_page(status: int, error: str, **headers: str) -> Answer:
    """The setup page again, its code refused with `error` (or the start, without a setup)."""
    enrolment = two_factor.pending_enrolment(me())
    if enrolment is None:
        return redirect(url_for("two_factor.index"), 303)
    html, status = page(
        "account/two_factor_setup.html", status, enrolment=enrolment, errors={"code": error}
    )
    return html, status, headers


@bp.post("/confirm")
def confirm() -> Answer:
    """A correct code turns two-factor login on; the recovery codes are shown this once."""
    attempt = counted()
    wait = attempt.admission.wait
    if wait is not None:
        return setup_page(429, login_limiter.wait_message(wait), **{"Retry-After": str(wait)})
    try:
        codes = two_factor.confirm_enrolment(me(), request.form.get("code", ""), utcnow())
    except two_factor.TwoFactorError as error:
        return setup_page(422, str(error))
    attempt.forget()
    return page("account/recovery_codes.html", codes=codes)


@bp.post("/disable")
def disable() -> Answer:
    """Turn two-factor login off: the password and a current code (or a recovery code)."""
    user = me()
    attempt = counted()
    wait = attempt.admission.wait
    if wait is not None:
        errors = {"code": login_limiter.wait_message(wait)}
        left = two_factor.codes_left(user)
        html, status = page("account/two_factor.html", 429, codes_left=left, errors=errors)
        return html, status, {"Retry-After": str(wait)}
    try:
        two_factor.disable(
            user, request.form.get("password", ""), request.form.get("code", ""), utcnow()
        )
    except two_factor.TwoFactorError as error:
        still = two_factor.codes_left(user) if two_factor.is_enabled(user) else None
        return page(
            "account/two_factor.html", 422, codes_left=still, errors={error.field: str(error)}
        )
    attempt.forget()
    return htmx_redirect("Two-factor login is off.", url_for("two_factor.index"))
