"""The scheduler web application: `create_app` builds it, nothing runs at import."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import Any

import click
from flask import Flask
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from werkzeug.middleware.proxy_fix import ProxyFix

from webapp.config import (
    EXTENSION_KEY,
    INSTANCE_FILE,
    ConfigError,
    is_secret_key_optional,
    load_settings,
)
from webapp.database import install_engine_hooks
from webapp.extensions import csrf, db, login_manager, migrate

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SettingsRefused(click.ClickException, ConfigError):
    """A ConfigError on its way out of create_app: `flask --app webapp ...`, `scheduler-worker`
    and the Celery worker build the app inside click, which prints it as one line (exit 1)."""


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Builds the Flask app from its settings: the defaults, the instance folder's config.py,
    the environment, and last `config` (tests pass a mapping)."""
    try:
        return build_app(config)
    except ConfigError as error:
        raise SettingsRefused(str(error)) from None


def build_app(config: Mapping[str, Any] | None) -> Flask:
    app = Flask(
        __name__,
        template_folder=os.path.join(PROJECT_ROOT, "templates"),
        static_folder=os.path.join(PROJECT_ROOT, "static"),
        instance_path=os.environ.get("SCHEDULER_INSTANCE_PATH")
        or os.path.join(PROJECT_ROOT, "instance"),
    )
    os.makedirs(app.instance_path, exist_ok=True)
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        REMEMBER_COOKIE_HTTPONLY=True,
        REMEMBER_COOKIE_SAMESITE="Lax",
        WTF_CSRF_TIME_LIMIT=None,
    )
    loaded = load_settings(app.instance_path, config)
    settings = app.extensions[EXTENSION_KEY] = loaded.settings
    app.config.update(loaded.flask_config(app.instance_path))
    app.config.setdefault(
        "SQLALCHEMY_ENGINE_OPTIONS",
        settings.engine_options(str(app.config["SQLALCHEMY_DATABASE_URI"])),
    )
    if not app.config.get("SECRET_KEY"):
        if not is_secret_key_optional(app.config):
            raise ConfigError(
                "SECRET_KEY is not set: export SECRET_KEY or set it in "
                f"{os.path.join(app.instance_path, INSTANCE_FILE)} (see docs/reference/settings.md)"
            )
        app.config["SECRET_KEY"] = secrets.token_hex(32)
    # Flask's own default is off; ours is on, unless a source above chose.
    secure_cookies = settings.SESSION_COOKIE_SECURE
    if secure_cookies is None:
        secure_cookies = not (app.debug or app.testing)
    app.config.update(SESSION_COOKIE_SECURE=secure_cookies, REMEMBER_COOKIE_SECURE=secure_cookies)
    if settings.framed:
        # Shown in another site's frame, the panel's requests are cross-site: its cookies go
        # along only as SameSite=None, which browsers take only with Secure (localhost counts
        # as secure for that, so tests and `make run` work over http). Partitioned (CHIPS):
        # kept per embedding site, so browsers that block third-party cookies still send it.
        app.config.update(
            SESSION_COOKIE_SAMESITE="None",
            SESSION_COOKIE_SECURE=True,
            SESSION_COOKIE_PARTITIONED=True,
            REMEMBER_COOKIE_SAMESITE="None",
            REMEMBER_COOKIE_SECURE=True,
        )

    proxies = settings.SCHEDULER_TRUSTED_PROXIES
    if proxies:
        # The client's address (the login limiter's key) and scheme come from the proxies'
        # X-Forwarded-* headers, and only from as many as were configured: never spoofable.
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=proxies, x_proto=proxies, x_host=proxies, x_port=proxies
        )

    try:
        db.init_app(app)  # creates the engine: the first use of the database URL
    except (ArgumentError, NoSuchModuleError) as error:
        # Not the URL itself in the message: it may hold a password.
        raise ConfigError(f"DATABASE_URL cannot be used: {error}") from None
    migrate.init_app(
        app, db, directory=os.path.join(PROJECT_ROOT, "migrations"), render_as_batch=True
    )
    login_manager.init_app(app)
    from webapp.web import security

    security.install_request_guard(app)  # first: before the CSRF check reads the form
    csrf.init_app(app)
    with app.app_context():
        install_engine_hooks(db.engine)

    from webapp import (  # noqa: F401  (their tables join the metadata)
        calendar_models,
        rollup_models,
        sign_in_models,
        token_models,
    )
    from webapp.catalog.current import install_catalog
    from webapp.cli import register_commands
    from webapp.web import auth

    install_catalog(app)
    login_manager.user_loader(auth.load_user)
    login_manager.login_view = "auth.login"
    app.register_blueprint(auth.bp)
    if settings.single_sign_on:  # Authlib and requests imported only where they serve
        from webapp.web import sso

        sso.install(app, settings)
    from webapp.web import register_panel

    register_panel(app)
    from webapp.web import health, metrics

    # Outside the panel: for probes and Prometheus, without a session, a login or CSRF.
    app.register_blueprint(health.bp)
    app.register_blueprint(metrics.bp)
    from webapp import api

    api.install(app)  # after the panel: its id converter, and its error pages to defer to
    security.install_headers(app)
    register_commands(app)
    return app
