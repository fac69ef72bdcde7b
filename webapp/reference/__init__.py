"""The documentation's reference pages, generated from the code when the site is built, never
written by hand: docs/hooks.py replaces each marker line `<!-- reference: NAME -->` of a page
with what NAME's renderer makes (Markdown). The commands from the click commands, the settings
from `Settings`, the REST API from the OpenAPI document the app serves, the bundled jobs from
the catalog, the tables from the SQLAlchemy metadata."""

from __future__ import annotations

import re
from collections.abc import Callable

from webapp.reference import api, catalog, cli, settings, tables

MARKER = re.compile(r"^<!-- reference: ([a-z]+) -->$", re.MULTILINE)
RENDERERS: dict[str, Callable[[], str]] = {
    "cli": cli.render,
    "settings": settings.render,
    "api": api.render,
    "catalog": catalog.render,
    "tables": tables.render,
}


def fill_markers(markdown: str) -> str:
    """The page with each marker replaced by its reference; an unknown name is an error."""

    def rendered(found: re.Match[str]) -> str:
        name = found.group(1)
        if name not in RENDERERS:
            raise ValueError(f"unknown reference {name!r}: one of {', '.join(RENDERERS)}")
        return RENDERERS[name]()

    return MARKER.sub(rendered, markdown)
