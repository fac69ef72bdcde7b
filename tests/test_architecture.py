"""The layers of docs/architecture.md, checked: each package imports only the layers below it."""

from __future__ import annotations

import ast
import re
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


def imported_modules(path: Path) -> set[str]:
    """Every `webapp...` module that the file imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "webapp":  # `from webapp import cron` names a module
                found.update(
                    f"webapp.{alias.name}" if is_module(alias.name) else "webapp"
                    for alias in node.names
                )
            else:
                found.add(node.module)
    return {name for name in found if name == "webapp" or name.startswith("webapp.")}


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


# Names of HTML elements that markup built in Python would contain (`<span`, `</td>`, `<a `...).
HTML_TAG = re.compile(
    r"</?(a|b|body|br|button|code|dd|del|details|div|dl|dt|em|form|h[1-6]|head|html|i|img|"
    r"input|ins|label|li|link|meta|ol|option|p|pre|script|section|select|small|span|strong|"
    r"style|summary|svg|table|tbody|td|textarea|th|thead|time|tr|ul)(\s|>|/>)",
    re.IGNORECASE,
)
# Markup built in Python escapes by hand or marks a string safe: both are the templates' job.
MARKUP_NAMES = {"Markup", "escape"}
# (module path, a string it may hold) that look like markup and are not: none so far.
NOT_MARKUP: set[tuple[str, str]] = set()


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes in `tree` (they describe markup, they do not build it)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def markup_in_python(source: str, relative: str) -> list[str]:
    """The string constants of a module (`source`, at `relative` in webapp/) that contain an
    HTML tag, and its uses of Markup and escape (markupsafe's, or Flask's and Jinja's)."""
    tree = ast.parse(source)
    skipped = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in skipped and HTML_TAG.search(node.value):
                if (relative, node.value) not in NOT_MARKUP:
                    found.append(f"line {node.lineno}: {node.value[:60]!r}")
        elif isinstance(node, ast.ImportFrom) and node.module in {"markupsafe", "flask", "jinja2"}:
            names = {alias.name for alias in node.names} & MARKUP_NAMES
            found += [f"line {node.lineno}: imports {name}" for name in sorted(names)]
        elif isinstance(node, ast.Attribute) and node.attr in MARKUP_NAMES:
            if isinstance(node.value, ast.Name) and node.value.id in {"markupsafe", "jinja2"}:
                found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_builds_html(path: Path) -> None:
    """Rows, badges and forms are Jinja templates and macros under autoescape (templates/):
    no string of HTML in Python, no hand escaping, nothing marked safe."""
    source = path.read_text(encoding="utf-8")
    assert not markup_in_python(source, str(path.relative_to(PACKAGE)))


def test_the_html_check_finds_markup_built_in_python() -> None:
    """The check above can fail: an f-string row, a Markup badge and a hand escape are found."""
    source = (
        '"""A docstring may name <span> and <tr> elements."""\n'
        "from markupsafe import Markup, escape\n"
        "def row(name):\n"
        "    return Markup(f'<tr><td>{escape(name)}</td></tr>')\n"
        "BADGE = '<span class=\"badge\">x</span>'\n"
        "MESSAGE_ID = '<{key}@example.com>'\n"
    )
    found = markup_in_python(source, "web/probe.py")
    assert sorted(found) == [
        "line 2: imports Markup",
        "line 2: imports escape",
        "line 4: '</td></tr>'",
        "line 4: '<tr><td>'",
        "line 5: '<span class=\"badge\">x</span>'",
    ]
