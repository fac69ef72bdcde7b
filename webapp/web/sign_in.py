"""Opening a one-time sign-in link (made by POST /api/v1/admin/sign-in-links;
services.sign_in_links).

GET shows whom the link signs in, and where, with a **Continue** button; it reads and writes
nothing else, so a mail scanner or a chat preview that fetches the link does not use it up.
Continue (POST, with the CSRF token of the page) uses the link and signs in. A browser signed in
as someone else is signed out of that login first (the page says so before): the host application
has just vouched for the person at this browser, and whoever was signed in here is not them.

A login by link asks for no second factor (the host is the factor): the session remembers how it
began (`auth.METHOD_KEY`, "link"), and a tenant's "require two-factor login for admins" does not
send it to enrolment (`auth.must_enrol_now`). With the link's return URL, the header shows
"Back to <host>" for that session.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, redirect, render_template, session, url_for
from flask_login import current_user, login_user
from werkzeug.wrappers import Response

from webapp.database import utcnow
from webapp.services import sign_in_links
from webapp.services.sign_in_links import LinkRefused
from webapp.web import auth, tenancy
from webapp.web.auth import lifetimes

bp = Blueprint("sign_in", __name__)

# In the signed session cookie: this login began with a link (and where "Back to" leads).
SESSION_KEY = "sign_in_link"


def refused(refusal: LinkRefused) -> tuple[str, int]:
    page = render_template("errors/error.html", title=refusal.title, text=refusal.text)
    return page, refusal.status


@bp.get("/sign-in/<slug>/<token>")
def confirm(slug: str, token: str) -> tuple[str, int]:
    """Whom the link signs in, to which tenant, and its Continue button; nothing is used yet."""
    try:
        link = sign_in_links.usable_link(slug, token, utcnow())
    except LinkRefused as refusal:
        return refused(refusal)
    other = current_user.email if current_user.is_authenticated else None
    return render_template(
        "auth/sign_in_link.html", link=link, other=other if other != link.email else None
    ), 200


@bp.post("/sign-in/<slug>/<token>")
def use(slug: str, token: str) -> Response | tuple[str, int]:
    """Use the link: sign its person into its tenant (ending this browser's other login)."""
    ending = current_user.get_id() if current_user.is_authenticated else None
    try:
        signed = sign_in_links.sign_in(slug, token, utcnow(), lifetimes(), ending)
    except LinkRefused as refusal:
        return refused(refusal)
    session.clear()  # nothing of the session before (its CSRF token) outlives the sign-in
    login_user(signed.user)
    session[auth.METHOD_KEY] = "link"  # no second factor asked, no enrolment required
    session[tenancy.SESSION_KEY] = signed.tenant.id
    session[SESSION_KEY] = {"return_url": signed.return_url}
    return redirect(url_for("schedules.index"), 303)


def by_link() -> bool:
    """Whether the current login began with a sign-in link."""
    return current_user.is_authenticated and isinstance(session.get(SESSION_KEY), dict)


@bp.app_context_processor
def back_link() -> dict[str, Any]:
    """`back_to`: the header's "Back to <host>" (its URL and host) in a login by link that had
    a return URL; None otherwise."""
    url = session.get(SESSION_KEY, {}).get("return_url") if by_link() else None
    if not url:
        return {"back_to": None}
    return {"back_to": {"url": url, "host": sign_in_links.return_host(url)}}
