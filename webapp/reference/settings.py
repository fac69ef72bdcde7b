"""The settings' reference: every field of `Settings`, its type, default and meaning (the
docstring under it in webapp/config.py)."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic.fields import FieldInfo

from webapp.config import Settings
from webapp.reference.text import cell, code, table

WORDS = {str: "text", bytes: "text", int: "integer", float: "number", bool: "yes or no"}


def kind_of(annotation: Any) -> str:
    """A setting's type in words: `integer`, `one of ...`, `comma-separated list`."""
    if typing.get_origin(annotation) is typing.Annotated:
        return kind_of(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(code(value) for value in typing.get_args(annotation))
    if typing.get_origin(annotation) is list:
        return "comma-separated list"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [option for option in typing.get_args(annotation) if option is not type(None)]
        words = dict.fromkeys(kind_of(option) for option in options)
        optional = type(None) in typing.get_args(annotation)
        return " or ".join(words) + (", or empty" if optional else "")
    return WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def bounds_of(field: FieldInfo) -> str:
    limits = {
        bound: getattr(rule, bound)
        for rule in field.metadata
        for bound in ("ge", "gt", "le")
        if getattr(rule, bound, None) is not None
    }
    if "ge" in limits and "le" in limits:
        return f", {limits['ge']} to {limits['le']}"
    if "gt" in limits:
        return f", above {limits['gt']}"
    if "ge" in limits:
        return f", at least {limits['ge']}"
    return ""


def default_of(value: object) -> str:
    if value in ("", []):
        return "(empty)"
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return code("yes" if value else "no")
    return code(value)


def rows() -> list[tuple[str, str, str, str]]:
    return [
        (
            code(name),
            kind_of(field.annotation) + bounds_of(field),
            default_of(field.default),
            cell(field.description or ""),
        )
        for name, field in Settings.model_fields.items()
    ]


def render() -> str:
    return table(("Setting", "Type", "Default", "Meaning"), rows()) + "\n"
