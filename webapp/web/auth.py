"""Logging in and out."""

from __future__ import annotations

import functools
import secrets
from datetime import datetime, timedelta
from typing import Literal
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask_login import current_user, login_required, login_user, logout_user
from flask_wtf import FlaskForm
from sqlalchemy import select
from werkzeug.security import check_password_hash
from werkzeug.wrappers import Response
from wtforms import EmailField, PasswordField, StringField
from wtforms.validators import DataRequired

from webapp.config import settings
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import User
from webapp.services import sessions, two_factor
from webapp.services.accounts import has_password, hash_password
from webapp.web import device_cookies, login_limiter

bp = Blueprint("auth", __name__)


@bp.context_processor
def single_sign_on() -> dict[str, str | None]:
    """The login page's "Sign in with ..." button: the provider's name, None without one."""
    chosen = settings()
    return {"sso_provider": chosen.sso_provider if chosen.single_sign_on else None}


@functools.cache
def unknown_user_hash() -> str:
    """Checked when the email is unknown, so that both failures take the same time: made by the
    process's first login, whoever it is for (made by its first unknown email's, that login
    took twice the time: a hash made, then checked)."""
    return hash_password(secrets.token_hex(16))


class LoginForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired()])
    password = PasswordField("Password", validators=[DataRequired()])


def lifetimes() -> sessions.Lifetimes:
    return sessions.Lifetimes.of(settings())


def load_user(token: str) -> User | None:
    """Flask-Login's loader: the session cookie holds a login's token (see services.sessions)."""
    return sessions.find(token, utcnow(), lifetimes())


def is_own_path(target: str | None) -> bool:
    """`next` may only send the user to a path of this site, never to another host. Control
    characters (CR/LF) are refused too: a Location header cannot carry them, and the redirect
    comes after the action's write, so it must never fail."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return False
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in target):
        return False
    parts = urlsplit(target)
    return not parts.scheme and not parts.netloc and "\\" not in target


def too_many_attempts(template: str, form: FlaskForm, wait: int) -> tuple[str, int, dict[str, str]]:
    flash(login_limiter.wait_message(wait), "error")
    return render_template(template, form=form), 429, {"Retry-After": str(wait)}


@bp.route("/login", methods=["GET", "POST"])
def login() -> str | Response | tuple[str, int, dict[str, str]] | tuple[str, int]:
    """Show the login form and log the user in (or, with two-factor login on, ask for a code)."""
    form = LoginForm()
    if form.validate_on_submit():
        email = (form.email.data or "").strip().lower()
        now = utcnow()
        user = db.session.scalar(select(User).where(User.email == email))
        subjects = login_limiter.Subjects.of(
            request.remote_addr,
            email,
            device_cookies.known_device(email),
            second_factor=user is not None and two_factor.is_enabled(user),
        )
        admission = login_limiter.admit(subjects, now)
        if admission.wait is not None:
            return too_many_attempts("auth/login.html", form, admission.wait)
        # A user made by a sign-in link has no password: checked as an unknown one is (the
        # same time), and never a match.
        known = user is not None and has_password(user)
        unknown = unknown_user_hash()
        password_hash = user.password_hash if user and known else unknown
        if check_password_hash(password_hash, form.password.data or "") and user and known:
            if two_factor.is_enabled(user):
                return begin_second_step(user, admission)
            attempt = login_limiter.Attempt(subjects, admission)
            return complete_login(user, now, request.args.get("next"), attempt=attempt)
        if admission.flooded_wait is not None:
            return too_many_attempts("auth/login.html", form, admission.flooded_wait)
        flash("Wrong email or password.", "error")
        return render_template("auth/login.html", form=form), 401
    return render_template("auth/login.html", form=form)


# How the session's user signed in, in the signed session cookie: "password" (with its second
# factor, when on), "sso" (single sign-on) or "link" (a one-time sign-in link, web.sign_in): for
# the last two the identity provider (the host application) is the factor.
METHOD_KEY = "signed_in_with"
SignInMethod = Literal["password", "sso", "link"]


def complete_login(
    user: User,
    now: datetime,
    target: str | None,
    *,
    attempt: login_limiter.Attempt | None = None,
    method: SignInMethod = "password",
) -> Response:
    """Starts the session of a user who passed every step of `method`, and sends them on to
    `target`: the one end of every way in, and the one place that decides whether a tenant's
    requirement of two-factor login applies (a password login only)."""
    with write_transaction(db.session):
        user.last_login_at = now
        if attempt is not None:  # a password's (and its code's), as the limiter counted it
            login_limiter.forget_success(attempt.subjects, attempt.admission)
        user = sessions.start(user, now, lifetimes())
    if target is None or not is_own_path(target):
        target = url_for("schedules.index")
    # A new session: nothing of the anonymous one (its CSRF token) outlives the login.
    session.clear()
    session[METHOD_KEY] = method
    login_user(user)
    if must_enrol_now(user):  # a tenant of theirs requires it of its admins
        flash("Your tenant requires two-factor login of its admins: set it up now.", "info")
        target = url_for("two_factor.index")
    response = redirect(target, 303)
    device_cookies.remember_device(response, user.email)
    return response


def must_enrol_now(user: User) -> bool:
    """Whether the session's user must set up two-factor login before anything else: a tenant
    of theirs requires it of its admins, and they signed in with a password (single sign-on is
    exempt: the identity provider is the factor)."""
    return session.get(METHOD_KEY, "password") == "password" and two_factor.must_enrol(user)


# The pending second step, in the signed session cookie: whose password was right, and until
# when the code may follow. No login exists before the code is right.
PENDING_KEY = "two_factor_pending"
SECOND_STEP_TTL = timedelta(minutes=5)


class CodeForm(FlaskForm):
    code = StringField("Code", validators=[DataRequired(message="Enter a code.")])


def begin_second_step(user: User, admission: login_limiter.Admission) -> Response:
    """The password was right: the attempt is no failure, and the code comes next."""
    with write_transaction(db.session):
        login_limiter.forget_attempt(admission)
    session.clear()
    session[PENDING_KEY] = {
        "user_id": user.id,
        "until": (utcnow() + SECOND_STEP_TTL).timestamp(),
        "next": request.args.get("next", ""),
    }
    return redirect(url_for("auth.second_step"), 303)


def pending_user() -> User | None:
    pending = session.get(PENDING_KEY)
    if not isinstance(pending, dict) or pending.get("until", 0) < utcnow().timestamp():
        return None
    user = db.session.get(User, pending.get("user_id"))
    return user if user is not None and two_factor.is_enabled(user) else None


@bp.route("/login/two-factor", methods=["GET", "POST"])
def second_step() -> str | Response | tuple[str, int, dict[str, str]] | tuple[str, int]:
    """The second step of a login with two-factor login on: a TOTP code or a recovery code.
    Wrong codes count against the login limiter as wrong passwords do."""
    user = pending_user()
    if user is None:
        session.pop(PENDING_KEY, None)
        flash("Log in again: the sign-in took too long or was not started.", "error")
        return redirect(url_for("auth.login"), 303)
    form = CodeForm()
    if not form.validate_on_submit():
        status = 422 if request.method == "POST" else 200
        return render_template("auth/two_factor.html", form=form), status
    now = utcnow()
    subjects = login_limiter.Subjects.of(
        request.remote_addr,
        user.email,
        device_cookies.known_device(user.email),
        second_factor=True,
    )
    admission = login_limiter.admit(subjects, now)
    if admission.wait is not None:
        return too_many_attempts("auth/two_factor.html", form, admission.wait)
    with write_transaction(db.session):
        accepted = two_factor.use_code(user, form.code.data or "", now)
    if accepted:
        target = session.pop(PENDING_KEY)["next"]
        attempt = login_limiter.Attempt(subjects, admission)
        return complete_login(user, now, target, attempt=attempt)
    if admission.flooded_wait is not None:
        return too_many_attempts("auth/two_factor.html", form, admission.flooded_wait)
    form.code.errors = ["Wrong or already used code."]
    return render_template("auth/two_factor.html", form=form), 401


def renew_login() -> None:
    """Moves the current login to a new session on the server and ends the old one, so a copy
    of the cookie taken before (during an operator's view of a tenant, say) stops working."""
    with write_transaction(db.session):
        sessions.end(current_user.get_id())
        user = sessions.start(current_user._get_current_object(), utcnow(), lifetimes())
    login_user(user)


@bp.post("/logout")
@login_required
def logout() -> Response:
    """Log out: the session ends on the server too, so a copy of its cookie is worthless."""
    with write_transaction(db.session):
        sessions.end(current_user.get_id())
    logout_user()
    session.clear()
    flash("You are logged out.", "info")
    return redirect(url_for("auth.login"), 303)
