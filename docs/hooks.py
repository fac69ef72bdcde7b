"""MkDocs hook (mkdocs.yml, `hooks:`): fills the reference pages' markers from the code."""

from __future__ import annotations

from typing import Any

from webapp.reference import fill_markers


def on_page_markdown(markdown: str, **_: Any) -> str:
    return fill_markers(markdown)
