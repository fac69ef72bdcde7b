"""Text as the reference pages write it: Markdown that shows what it is given, as it is."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence

# A code span (`...`): shown as written by Markdown itself, so left alone.
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def plain(text: str) -> str:
    """`&`, `<` and `>` outside code spans as entities: a help text's `<host>` is shown, never
    read as an HTML tag."""
    shown, start = [], 0
    for span in CODE_SPAN.finditer(text):
        shown += [entities(text[start : span.start()]), span.group(0)]
        start = span.end()
    return "".join([*shown, entities(text[start:])])


def entities(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def prose(text: str | None) -> str:
    """A docstring or help text as Markdown paragraphs (click's no-rewrap marks dropped)."""
    lines = inspect.cleandoc(text or "").splitlines()
    return plain("\n".join(line for line in lines if line.strip() != "\b"))


def cell(text: object) -> str:
    """A value in one table cell: one line, its pipes escaped."""
    return " ".join(prose(str(text)).split()).replace("|", "\\|")


def code(text: object) -> str:
    """Code in a table cell: backticks (enough of them), pipes escaped."""
    shown = str(text)
    fence = "``" if "`" in shown else "`"
    padded = f" {shown} " if "`" in shown else shown
    return f"{fence}{padded}{fence}".replace("|", "\\|")


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
