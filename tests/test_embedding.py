"""SCHEDULER_FRAME_ANCESTORS: the headers that let the named origins frame the panel (and no one
else), the cookies a framed panel needs, and the values the setting refuses."""

from __future__ import annotations

import pytest
from flask import Flask

from webapp import create_app
from webapp.config import ConfigError

HOST = "https://app.example.com"


def panel(**config: object) -> Flask:
    return create_app(
        {"TESTING": True, "SECRET_KEY": "test", "SQLALCHEMY_DATABASE_URI": "sqlite://", **config}
    )


def test_by_default_no_site_may_frame_the_panel() -> None:
    response = panel().test_client().get("/login")
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"
    cookie = response.headers["Set-Cookie"]
    assert "SameSite=Lax" in cookie and "Partitioned" not in cookie


def test_the_named_origins_and_only_they_may_frame_it() -> None:
    framed = panel(SCHEDULER_FRAME_ANCESTORS=f"{HOST}, http://localhost:5001")
    response = framed.test_client().get("/login")
    policy = response.headers["Content-Security-Policy"]
    assert f"frame-ancestors {HOST} http://localhost:5001" in policy
    assert "script-src 'self'" in policy
    # X-Frame-Options cannot name an origin: DENY would overrule the policy in old browsers.
    assert "X-Frame-Options" not in response.headers


def test_a_framed_panels_cookies_are_samesite_none_secure_and_partitioned() -> None:
    framed = panel(SCHEDULER_FRAME_ANCESTORS=[HOST])  # tests: Secure would be off
    cookie = framed.test_client().get("/login").headers["Set-Cookie"]
    attributes = {part.strip() for part in cookie.split(";")}
    assert {"SameSite=None", "Secure", "HttpOnly", "Partitioned"} <= attributes


@pytest.mark.parametrize(
    "origin",
    ["*", "app.example.com", "https://app.example.com/", "https://*.example.com", "'self'"],
)
def test_a_frame_ancestor_must_be_an_origin(origin: str) -> None:
    with pytest.raises(ConfigError) as refused:
        panel(SCHEDULER_FRAME_ANCESTORS=[origin])
    assert str(refused.value) == (
        f"SCHEDULER_FRAME_ANCESTORS: {origin!r} is not an origin: write "
        "scheme://host[:port] (https://app.example.com), no path, no wildcard"
    )


def test_framing_with_insecure_cookies_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs SESSION_COOKIE_SECURE on"):
        panel(SCHEDULER_FRAME_ANCESTORS=[HOST], SESSION_COOKIE_SECURE=False)
