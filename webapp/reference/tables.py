"""The tables' reference: every table of the SQLAlchemy metadata with its columns, keys and
indexes, and the model's docstring where a model maps it."""

from __future__ import annotations

from sqlalchemy import Column, Index, Table, UniqueConstraint

from webapp.extensions import db
from webapp.reference.app import reference_app
from webapp.reference.text import cell, code, prose, table


def all_tables() -> list[Table]:
    reference_app()  # imports every model module, so the metadata holds every table
    return sorted(db.metadata.tables.values(), key=lambda found: found.name)


def model_docs() -> dict[str, str]:
    """Each mapped table's model docstring, by table name."""
    mappers = db.Model.registry.mappers  # type: ignore[attr-defined]
    return {
        mapper.local_table.name: mapper.class_.__doc__ or ""
        for mapper in mappers
        if isinstance(mapper.local_table, Table)
    }


def column_notes(column: Column[object]) -> str:
    notes = []
    if column.primary_key:
        notes.append("primary key")
    notes += [f"references `{key.target_fullname}`" for key in column.foreign_keys]
    if column.unique:
        notes.append("unique")
    if column.server_default is not None:
        notes.append("has a database default")
    return ", ".join(notes)


def partial(index: Index) -> str:
    """A partial index's condition, as PostgreSQL's is declared (SQLite's says the same)."""
    where = index.dialect_options["postgresql"].get("where")
    return f", only where {code(where)}" if where is not None else ""


def render_table(found: Table, doc: str) -> str:
    rows = [
        (
            code(column.name),
            code(column.type),
            "yes" if column.nullable else "no",
            cell(column_notes(column)),
        )
        for column in found.columns
    ]
    parts = [f"## `{found.name}`", prose(doc), table(("Column", "Type", "Null", "Notes"), rows)]
    constraints = [
        f"- unique: {', '.join(code(c.name) for c in constraint.columns)}"
        for constraint in found.constraints
        if isinstance(constraint, UniqueConstraint)
    ]
    indexes = [
        f"- index {code(index.name)}: {', '.join(code(c.name) for c in index.columns)}"
        + (" (unique)" if index.unique else "")
        + partial(index)
        for index in sorted(found.indexes, key=lambda index: str(index.name))
    ]
    if constraints or indexes:
        parts.append("\n".join(constraints + indexes))
    return "\n\n".join(part for part in parts if part)


def render() -> str:
    docs = model_docs()
    return "\n\n".join(render_table(found, docs.get(found.name, "")) for found in all_tables())
