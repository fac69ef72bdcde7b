"""The REST API's reference: every operation of the OpenAPI document the app serves at
/api/v1/openapi.json (path, method, summary, parameters, body, responses), then its schemas."""

from __future__ import annotations

from typing import Any

from webapp.api import openapi
from webapp.reference.app import reference_app
from webapp.reference.text import cell, code, prose, table

METHODS = ("get", "post", "put", "patch", "delete")


def document() -> dict[str, Any]:
    app = reference_app()
    with app.test_request_context():
        return openapi.document()


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) of every operation, by tag in the document's order, then path."""
    tags = [tag["name"] for tag in spec["tags"]]
    found = [
        (method, path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]
    return sorted(found, key=lambda each: (tags.index(each[2]["tags"][0]), each[1]))


def schema_of(spec: dict[str, Any], holder: dict[str, Any]) -> str:
    """The body's schema: a link to it under Schemas, or its type in words."""
    content = holder.get("content", {}).get("application/json", {})
    if "schema" not in content:
        return ""
    label = openapi.type_label(content["schema"])
    if label in spec["components"]["schemas"]:
        return f"[`{label}`](#{label.lower()})"
    return cell(label)


def render_operation(spec: dict[str, Any], method: str, path: str, op: dict[str, Any]) -> str:
    parts = [f"### `{method.upper()} {path}`", prose(op["summary"])]
    parameters = [
        (
            code(parameter["name"]),
            parameter["in"],
            cell(openapi.type_label(parameter.get("schema", {}))),
            "yes" if parameter.get("required") else "no",
            cell(parameter.get("description", "")),
        )
        for parameter in op.get("parameters", [])
    ]
    if parameters:
        header = ("Parameter", "In", "Type", "Required", "Meaning")
        parts.append(table(header, parameters))
    if "requestBody" in op:
        body = op["requestBody"]
        required = "required" if body.get("required") else "optional"
        parts.append(f"Body ({required}): {schema_of(spec, body)}.")
    responses = [
        (code(status), cell(response["description"]), schema_of(spec, response))
        for status, response in op["responses"].items()
    ]
    parts.append(table(("Status", "Meaning", "Body"), responses))
    if op.get("security") == [{"operator": []}]:
        parts.append("Takes an operator token.")
    return "\n\n".join(part for part in parts if part)


def render_schema(name: str, schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    rows = [
        (
            code(field),
            cell(openapi.type_label(definition)),
            "yes" if field in required else "no",
            cell(definition.get("description", "")),
        )
        for field, definition in schema.get("properties", {}).items()
    ]
    parts = [f"### `{name}`", prose(schema.get("description", ""))]
    if rows:
        parts.append(table(("Field", "Type", "Required", "Meaning"), rows))
    return "\n\n".join(part for part in parts if part)


def render() -> str:
    spec = document()
    sections: list[str] = []
    tag = None
    for method, path, operation in operations(spec):
        if operation["tags"][0] != tag:
            tag = operation["tags"][0]
            sections.append(f"## {tag.capitalize()}")
        sections.append(render_operation(spec, method, path, operation))
    sections.append("## Schemas")
    schemas = spec["components"]["schemas"]
    sections += [render_schema(name, schemas[name]) for name in sorted(schemas)]
    return "\n\n".join(sections) + "\n"
