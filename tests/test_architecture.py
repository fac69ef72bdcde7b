"""The layers of docs/architecture.md, checked: each package imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "webapp"

# The modules every layer may use: settings, the app's extensions, the database and the model.
FOUNDATION = {"config", "extensions", "database", "models"}
# Layer -> the layers it may import (besides itself). Mirrors the table in docs/architecture.md.
MAY_IMPORT: dict[str, set[str]] = {
    "cron": set(),
    "foundation": set(),
    "catalog": {"foundation"},
    "scheduler": {"cron", "catalog", "foundation"},
    "services": {"scheduler", "cron", "catalog", "foundation"},
    "web": {"services", "cron", "catalog", "foundation"},
    "api": {"services", "cron", "catalog", "foundation"},
    "cli": {"app", "services", "scheduler", "cron", "catalog", "foundation"},
    "app": {"web", "api", "cli", "services", "scheduler", "cron", "catalog", "foundation"},
}


def layer_of(dotted: str) -> str:
    """The layer of a module `webapp.x.y` (the app factory is `webapp` itself)."""
    parts = dotted.split(".")[1:]
    if not parts:
        return "app"
    return "foundation" if parts[0] in FOUNDATION else parts[0]


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def is_module(name: str) -> bool:
    return (PACKAGE / f"{name}.py").exists() or (PACKAGE / name).is_dir()


def absolute_module(path: Path, node: ast.ImportFrom) -> str:
    """The module a `from ... import` names, relative imports resolved against the file."""
    if node.level == 0:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]  # a module's own package
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_modules(path: Path, source: str | None = None) -> set[str]:
    """Every `webapp...` module that the file (or `source`, as if it were the file) imports, at
    its top or inside a function, relative imports (`from ..web import tenancy`) included."""
    found: set[str] = set()
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(path, node)
            # `from webapp import cron`, `from .. import web`: the names may be modules
            found.update(
                f"{module}.{alias.name}"
                if is_module(f"{module}.{alias.name}".removeprefix("webapp.").replace(".", "/"))
                else module
                for alias in node.names
            )
    return {name for name in found if name == "webapp" or name.startswith("webapp.")}


@pytest.mark.parametrize(
    ("relative", "module"),
    [
        ("from ..web import tenancy", "webapp.web.tenancy"),
        ("from .. import web", "webapp.web"),
        ("from . import schedules", "webapp.services.schedules"),
        ("from .schema import ScheduleIn", "webapp.services.schema"),
    ],
)
def test_relative_imports_count_as_the_modules_they_name(relative: str, module: str) -> None:
    # As if in a file of services/: a relative import of the web layer must not slip past.
    assert imported_modules(PACKAGE / "services" / "probe.py", relative) == {module}


def test_every_module_belongs_to_a_known_layer() -> None:
    layers = {layer_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert layers <= set(MAY_IMPORT), layers - set(MAY_IMPORT)


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_a_module_imports_only_its_own_layer_and_those_below(path: Path) -> None:
    own = layer_of(module_name(path))
    wrong = {
        name
        for name in imported_modules(path)
        if layer_of(name) != own and layer_of(name) not in MAY_IMPORT[own]
    }
    assert not wrong, f"{own} may not import {sorted(wrong)}"


def test_the_cron_package_needs_nothing_from_the_app() -> None:
    # Pure time math: it must stay usable (and testable) without Flask or a database.
    for path in (PACKAGE / "cron").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        roots = {
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert not roots & {"flask", "sqlalchemy", "webapp"}, path


def test_the_architecture_page_names_every_module() -> None:
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for package in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        row = next(line for line in page.splitlines() if f"`webapp/{package.name}/`" in line)
        missing = [
            path.stem
            for path in sorted(package.glob("*.py"))
            if path.stem != "__init__" and f"`{path.stem}`" not in row
        ]
        assert not missing, f"docs/architecture.md does not name {package.name}: {missing}"


def test_the_foundation_needs_no_command_line() -> None:
    # Settings are read by the web app, the worker and the Celery worker alike; only the app
    # factory turns a ConfigError into click's one-line error.
    for name in sorted(FOUNDATION):
        tree = ast.parse((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
        roots = {
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert "click" not in roots, name
