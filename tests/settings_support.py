"""Changing an app's settings in a test, as create_app would have read them: validated again."""

from __future__ import annotations

from typing import Any

from flask import Flask

from webapp.config import EXTENSION_KEY, Settings, settings


def reconfigure(app: Flask, **changes: Any) -> Settings:
    """The app's settings with `changes`, checked as load_settings checks them (a bad value is
    a ValidationError here), in place of the old ones."""
    changed = Settings.model_validate({**settings(app).model_dump(), **changes})
    app.extensions[EXTENSION_KEY] = changed
    return changed
