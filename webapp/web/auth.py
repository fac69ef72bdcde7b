"""Logging in and out."""

from __future__ import annotations

import functools
import secrets
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
from wtforms import EmailField, PasswordField
from wtforms.validators import DataRequired

from webapp.config import settings
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import User
from webapp.services import sessions
from webapp.services.accounts import hash_password
from webapp.web import device_cookies, login_limiter

bp = Blueprint("auth", __name__)


@functools.cache
def unknown_user_hash() -> str:
    """Checked when the email is unknown, so that both failures take the same time."""
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


def too_many_attempts(form: LoginForm, wait: int) -> tuple[str, int, dict[str, str]]:
    minutes = max(1, round(wait / 60))
    flash(
        f"Too many failed attempts. Wait {minutes} minute{'s' if minutes != 1 else ''} "
        "before trying again.",
        "error",
    )
    return render_template("auth/login.html", form=form), 429, {"Retry-After": str(wait)}


@bp.route("/login", methods=["GET", "POST"])
def login() -> str | Response | tuple[str, int, dict[str, str]] | tuple[str, int]:
    """Show the login form and log the user in."""
    form = LoginForm()
    if form.validate_on_submit():
        email = (form.email.data or "").strip().lower()
        now = utcnow()
        device_id = device_cookies.known_device(email)
        subjects = login_limiter.Subjects.of(request.remote_addr, email, device_id)
        admission = login_limiter.admit(subjects, now)
        if admission.wait is not None:
            return too_many_attempts(form, admission.wait)
        user = db.session.scalar(select(User).where(User.email == email))
        password_hash = user.password_hash if user else unknown_user_hash()
        if check_password_hash(password_hash, form.password.data or "") and user is not None:
            with write_transaction(db.session):
                user.last_login_at = now
                login_limiter.forget_success(subjects, admission)
                user = sessions.start(user, now, lifetimes())
            target = request.args.get("next")
            if target is None or not is_own_path(target):
                target = url_for("schedules.index")
            # A new session: nothing of the anonymous one (its CSRF token) outlives the login.
            session.clear()
            login_user(user)
            response = redirect(target, 303)
            device_cookies.remember_device(response, email)
            return response
        if admission.flooded_wait is not None:
            return too_many_attempts(form, admission.flooded_wait)
        flash("Wrong email or password.", "error")
        return render_template("auth/login.html", form=form), 401
    return render_template("auth/login.html", form=form)


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
