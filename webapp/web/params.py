"""Parsing what the user puts in URLs: ids, dates and choices, strictly, or 400 with a message.

Ids are primary keys of 4-byte integer columns (PostgreSQL `integer`), so only 1..2147483647
written in ASCII digits is an id: `str.isdigit()` and `int()` also accept '²' or Arabic-Indic
digits, and a bigger number overflows the database driver. An invalid filter value answers 400
with a message saying what was wrong (never a 500, never silently ignored); an empty value is no
filter. Route ids use the `id` converter: anything else in their place is a 404.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import date
from typing import NoReturn

from flask import Flask, abort, request
from werkzeug.routing import IntegerConverter, Map

from webapp.cron import FIRST_DAY, LAST_DAY

MAX_ID = 2_147_483_647  # the largest PostgreSQL `integer`
ID_PATTERN = "[0-9]{1,10}"  # not \d: that matches any Unicode digit
_ID = re.compile(ID_PATTERN)
_DATE = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}")


def parse_id(text: str | None) -> int | None:
    """The id written in `text`, or None if it is not 1..MAX_ID in ASCII digits."""
    if text is None or not _ID.fullmatch(text):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_ID else None


def bad_request(message: str) -> NoReturn:
    abort(400, description=message)


def shown(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "…"


def id_value(name: str, text: str | None) -> int | None:
    """None for a missing or empty value, the id, or 400."""
    if not text:
        return None
    value = parse_id(text)
    if value is None:
        bad_request(f"“{name}={shown(text)}” is not a valid id: a whole number from 1 to {MAX_ID}.")
    return value


def id_arg(name: str) -> int | None:
    """The query parameter `name` as an id: None if missing or empty, 400 if not an id."""
    return id_value(name, request.args.get(name))


def date_arg(name: str) -> date | None:
    """The query parameter `name` as a YYYY-MM-DD date in FIRST_DAY..LAST_DAY, or 400."""
    text = request.args.get(name, "")
    if not text:
        return None
    day = None
    if _DATE.fullmatch(text):
        try:
            day = date.fromisoformat(text)
        except ValueError:
            day = None
    if day is None or not FIRST_DAY <= day <= LAST_DAY:
        bad_request(
            f"“{name}={shown(text)}” is not a date between {FIRST_DAY} and {LAST_DAY} (YYYY-MM-DD)."
        )
    return day


def choice_arg(name: str, choices: Collection[str]) -> str:
    """The query parameter `name` if it is one of `choices`; "" if missing or empty; or 400."""
    text = request.args.get(name, "")
    if text and text not in choices:
        bad_request(f"“{name}={shown(text)}” is not one of: {', '.join(choices)}.")
    return text


class IdConverter(IntegerConverter):
    r"""`<id:name>`: Werkzeug's `int(min=1, max=MAX_ID)`, for ASCII digits only. Its own pattern,
    `\d+`, matches any Unicode digit and int() reads them, so `/runs/٣` would be run 3."""

    regex = ID_PATTERN

    def __init__(self, url_map: Map) -> None:
        super().__init__(url_map, min=1, max=MAX_ID)


def install(app: Flask) -> None:
    """Registers the `id` converter: before any blueprint whose rules use it."""
    app.url_map.converters["id"] = IdConverter
