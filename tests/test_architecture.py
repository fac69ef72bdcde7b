"""The layers of docs/architecture.md, checked: each package imports only the layers below it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "webapp"

# The modules every layer may use: settings, the app's extensions, the database and the model.
FOUNDATION = {
    "config",
    "extensions",
    "database",
    "models",
    "calendar_models",
    "sign_in_models",
    "token_models",
    "rollup_models",
    "run_rules",
    "release",
}
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
    # The documentation's generated reference pages: they read every layer; nothing imports them.
    "reference": {
        "app",
        "web",
        "api",
        "cli",
        "services",
        "scheduler",
        "cron",
        "catalog",
        "foundation",
    },
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


# The one module that inserts and updates runs (docs/architecture.md, "A run's states").
RUN_LIFECYCLE = PACKAGE / "scheduler" / "runs.py"
WRITES_RUNS_SQL = re.compile(r"\b(INSERT\s+INTO|UPDATE)\s+runs\b", re.IGNORECASE)
INSERTS_AND_UPDATES = {"insert", "update", "sqlite_insert", "postgresql_insert", "pg_insert"}


def run_writes(path: Path) -> list[str]:
    """Where the module writes `runs`: insert(Run) or update(Run) (of the model or its table,
    under any name it is imported as), Run(...) (an ORM row to add), Run.__table__.insert(),
    or SQL text that inserts into or updates runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {"Run"} | {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "webapp.models"
        for alias in node.names
        if alias.name == "Run" and alias.asname
    }

    def is_run(node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "__table__":
            node = node.value
        return isinstance(node, ast.Name) and node.id in names

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else None
            if isinstance(function, ast.Name):
                called = function.id
            if called in INSERTS_AND_UPDATES and node.args and is_run(node.args[0]):
                found.append(f"line {node.lineno}: {called}(Run)")
            elif is_run(function):
                found.append(f"line {node.lineno}: Run(...)")
            elif (
                isinstance(function, ast.Attribute)
                and function.attr in ("insert", "update")
                and is_run(function.value)
            ):
                found.append(f"line {node.lineno}: Run.__table__.{function.attr}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if WRITES_RUNS_SQL.search(node.value):
                found.append(f"line {node.lineno}: SQL that writes runs")
    return found


def test_only_the_run_lifecycle_module_writes_runs() -> None:
    assert run_writes(RUN_LIFECYCLE), "the check finds nothing even where runs are written"
    writers = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != RUN_LIFECYCLE and (found := run_writes(path))
    }
    assert not writers, f"only webapp/scheduler/runs.py may insert or update runs: {writers}"


# The modules that lock rows (docs/architecture.md, "Rules that live in one place"): each lock
# is a statement of its own, named where it is taken.
LOCKING_MODULES = {
    "scheduler/claims.py",  # the tick's claim of due schedules; a change waiting for a tick
    "scheduler/lease_query.py",  # the lease's queued runs, its capped tenants
    "scheduler/watchdog.py",  # overdue schedules flagged and cleared
    "scheduler/notify.py",  # the failure counts of schedules
    "scheduler/outbox.py",  # the outbox's lease
    "services/schedules.py",  # the tenant row, while its schedule quota is counted
    "web/login_limiter.py",  # an advisory lock per account
}
LOCKING_SQL = re.compile(r"FOR (NO KEY )?UPDATE|FOR (KEY )?SHARE|SKIP LOCKED|pg_advisory")


def row_locks(path: Path) -> list[str]:
    """Where the module locks rows: with_for_update(...), skip_locked=True, or SQL text that
    locks (docstrings and comments aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "with_for_update":
                # SQLAlchemy's key_share=True: FOR NO KEY UPDATE, which lets the foreign keys
                # of rows inserted meanwhile (FOR KEY SHARE) through.
                weakest = any(
                    k.arg == "key_share" and isinstance(k.value, ast.Constant) and k.value.value
                    for k in node.keywords
                )
                found.append(
                    f"line {node.lineno}: with_for_update{'' if weakest else ' (FOR UPDATE)'}"
                )
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg == "skip_locked" and not (
                    isinstance(value, ast.Constant) and value.value is False
                ):
                    found.append(f"line {node.lineno}: skip_locked")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and LOCKING_SQL.search(node.value)
        ):
            found.append(f"line {node.lineno}: SQL that locks")
    return found


def test_only_the_modules_that_lock_rows_lock_them() -> None:
    found = {
        str(path.relative_to(PACKAGE)): row_locks(path) for path in sorted(PACKAGE.rglob("*.py"))
    }
    lockers = {name for name, locks in found.items() if locks}
    assert lockers - LOCKING_MODULES == set(), {name: found[name] for name in lockers}
    assert LOCKING_MODULES - lockers == set(), "listed as locking rows, and locks none"
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rule = page.split("- **Locking SQL**")[1].split("\n- **")[0]
    assert all(f"`webapp/{name}`" in rule for name in LOCKING_MODULES), rule


def test_row_locks_are_the_weakest_that_do_the_job() -> None:
    """No path changes a key under a lock it took first (a DELETE takes its own): FOR UPDATE,
    which waits for every row inserted meanwhile that refers to the locked one, is the lock
    that made edits, pauses and the tick deadlock (tests/test_lock_order.py)."""
    strong = {
        str(path.relative_to(PACKAGE)): [lock for lock in row_locks(path) if "FOR UPDATE" in lock]
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert {name: locks for name, locks in strong.items() if locks} == {}


SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|LISTEN|PRAGMA)\b|\bFROM\b.*\bWHERE\b"
)


def assembled_sql(path: Path) -> list[str]:
    """Where the module assembles SQL from strings: an f-string or str.format of SQL text, or
    text() of anything but a constant."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            literal = "".join(
                part.value
                for part in node.values
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            )
            if SQL_START.search(literal):
                found.append(f"line {node.lineno}: an f-string of SQL")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            template = node.func.value
            if (
                node.func.attr == "format"
                and isinstance(template, ast.Constant)
                and isinstance(template.value, str)
                and SQL_START.search(template.value)
            ):
                found.append(f"line {node.lineno}: str.format of SQL")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "text"
            and node.args
            and not isinstance(node.args[0], ast.Constant | ast.Name)
        ):
            found.append(f"line {node.lineno}: text() of an expression")
    return found


def test_no_sql_is_assembled_from_strings() -> None:
    found = {
        str(path.relative_to(PACKAGE)): places
        for path in sorted(PACKAGE.rglob("*.py"))
        if (places := assembled_sql(path))
    }
    assert not found, f"SQL as Core or named text() constants with bound parameters: {found}"


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
