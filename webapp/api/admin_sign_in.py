"""The operator API's one-time sign-in links: POST /api/v1/admin/sign-in-links answers the URL
that signs one person into one tenant's panel (services.sign_in_links; web.sign_in opens it).

No Idempotency-Key here, unlike the other POSTs (one is refused, 400, as for a tenant's token
made by the operator API): a replayed answer would have to be stored, and it holds the link's
token, which the database keeps only as a hash. A retry makes another link, which costs nothing
(an unused link expires by itself)."""

from __future__ import annotations

from flask import Response, request, url_for

from webapp.api import auth
from webapp.api.admin_schemas import SignInLinkOut
from webapp.api.problems import Problem
from webapp.api.views import answer, body, bp
from webapp.config import settings
from webapp.database import utcnow
from webapp.services import sign_in_links

NO_KEY = (
    "this endpoint takes no Idempotency-Key: its answer holds the link's token, which is never "
    "stored, so it cannot be replayed; a retry makes another link"
)


def link_url(slug: str, token: str) -> str:
    """The link as the person reaches the panel: at SCHEDULER_BASE_URL when it is set, else at
    the address this request came to."""
    base = settings().SCHEDULER_BASE_URL.rstrip("/")
    if base:
        return base + url_for("sign_in.use", slug=slug, token=token)
    return url_for("sign_in.use", slug=slug, token=token, _external=True)


@bp.post("/v1/admin/sign-in-links")
def create_sign_in_link() -> Response:
    """A one-time link that signs a person into a tenant's panel, making them a member on
    first use."""
    if "Idempotency-Key" in request.headers:
        raise Problem.invalid({"Idempotency-Key": NO_KEY}, status=400)
    made = sign_in_links.create_link(body(), auth.actor(), utcnow(), settings())
    url = link_url(made.link.tenant.slug, made.token)
    response = answer(SignInLinkOut(url=url, expires_at=made.link.expires_at))
    response.headers["Cache-Control"] = "no-store"  # no copy of the link in any cache
    return response
