"""The app's job catalog, built once per app from configuration (never from the database)."""

from __future__ import annotations

from flask import Flask, current_app

from webapp.catalog import Catalog, build_catalog
from webapp.config import settings

EXTENSION_KEY = "scheduler_catalog"


def install_catalog(app: Flask) -> Catalog:
    chosen = settings(app)
    catalog = build_catalog(
        demo_jobs=chosen.SCHEDULER_DEMO_JOBS, modules=chosen.SCHEDULER_JOB_MODULES
    )
    app.extensions[EXTENSION_KEY] = catalog
    return catalog


def current_catalog() -> Catalog:
    catalog: Catalog = current_app.extensions[EXTENSION_KEY]
    return catalog
