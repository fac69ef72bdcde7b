"""Every shell session and code block of README.md and docs/tutorial.md, run as a reader runs
it (tests/docs_examples.py says how each kind of block is run and compared).

What is not run as written, and what stands in for it:
- `pip install '.[...]'` needs the package index: the extras it names must exist and what they
  require be installed here (tests/test_packaging.py installs the checkout for real).
- `make run` runs for real in a stand-in checkout, with the tests' virtualenv as its `.venv`
  (its recipe's `pip install -e .` needs the package index) and on a free port instead of 5000;
  the test reads the URL and login it prints, logs in there, and stops it as Ctrl-C does.
- `make test` is the whole suite, which CI runs (`.ci/run`): here `make -n test` shows that its
  recipe runs the suite's pytest.
- The reader's database URLs become a throwaway PostgreSQL database of the suite's server (or,
  for the quick start, make run's own SQLite file), the ports 5000, 8000 and 8001 free ports,
  and the webhook secret shown the one the panel made; `read -rs` is typed a password.
- What the reader does in the panel between blocks, the test does over HTTP as a browser
  without JavaScript would: it logs in with what make run printed, saves the tutorial's
  webhook URL and reads the secret, and reads each run's page (succeeded, with the output
  shown). The tutorial's "From the panel" way to make a schedule is prose: the test takes the
  command line's.
- What varies between runs is named in each test's VARIES: run ids (and whether the worker has
  started the run when `schedule run` prints), a token's prefix, the migration head, the
  version, a worker's host; any time stands for any time.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests

from tests.conftest import PostgresServer, require_postgres
from tests.docs_examples import (
    BIN,
    CSRF_META,
    ROOT,
    Block,
    MakeRun,
    Shell,
    as_typed,
    checkout_stand_in,
    fenced_blocks,
    make_run,
    output_match,
)
from webapp.catalog import JobContext, PermanentError

README = ROOT / "README.md"
TUTORIAL = ROOT / "docs" / "tutorial.md"
KINDS = {"session", "make", "file", "output", "not executed"}
PASSWORD = "correct-horse-battery"

# The README's quick start and first job: make run's demo (SQLite, in the stand-in checkout).
README_REPLACE = {".venv/bin/activate": f"{BIN}/activate"}
# A run's id, and its state when the command prints: the worker may have started it already.
README_VARIES = {"run 58 queued": r"run (?P<run>\d+) (?:queued|running|succeeded)"}

# The README's "Go to production", in the checkout (gunicorn.conf.py is there).
PRODUCTION_VARIES = {
    "0022": r"\d{4}",  # the newest migration
    "0.2.0": r"\d+\.\d+\.\d+\S*",  # the installed release
    "worker 1 on db-worker-1, 1 s ago": r"worker \d+ on \S+, \d+ s ago",
}

# The tutorial, on PostgreSQL.
SHOWN_SECRET = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
TUTORIAL_VARIES = {
    "run 12 queued": r"run (?P<run>\d+) (?:queued|running|succeeded)",
    "2781fe06": r"[0-9a-f]{8}",  # a token's prefix
    '"id": 12,': r'"id": \d+,',
    '"schedule_id": 7,': r'"schedule_id": \d+,',
    "run 13 queued": r"run \d+ (?:queued|running|failed)",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def reader_environment(**settings: str) -> dict[str, str]:
    """The tests' environment without the app's settings (a reader starts with none), the
    tests' virtualenv first on the PATH, and the checkout importable (as it is installed)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("SCHEDULER_") and name not in {"DATABASE_URL", "SECRET_KEY"}
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **settings}


def marked(path: Path, kind: str, argument: str = "") -> list[Block]:
    return [b for b in fenced_blocks(path) if b.kind == kind and b.argument == argument]


def test_the_readme_has_at_most_300_lines() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= 300, f"README.md has {lines} lines"


@pytest.mark.parametrize("path", [README, TUTORIAL], ids=["readme", "tutorial"])
def test_every_block_is_run_or_says_why_not(path: Path) -> None:
    blocks = fenced_blocks(path)
    assert blocks
    unmarked = [block.where for block in blocks if block.kind not in KINDS]
    assert unmarked == [], "mark each block (tests/docs_examples.py says how)"
    assert all(block.argument for block in blocks if block.kind == "not executed")


@pytest.mark.parametrize(
    ("path", "literals"),
    [
        (README, [*README_REPLACE, *README_VARIES, *PRODUCTION_VARIES]),
        (TUTORIAL, [*TUTORIAL_VARIES, "127.0.0.1:5000", '("127.0.0.1", 8001)', SHOWN_SECRET]),
    ],
    ids=["readme", "tutorial"],
)
def test_what_varies_is_in_the_docs(path: Path, literals: list[str]) -> None:
    """A stale entry of VARIES or of a replacement would excuse nothing: each is in its doc."""
    text = path.read_text(encoding="utf-8")
    assert [literal for literal in literals if literal not in text] == []


class Walk:
    """A reader going through a doc's blocks in order: sessions in one terminal, files saved
    in the checkout, each `make run` replacing the one before."""

    def __init__(
        self,
        directory: Path,
        shell: Shell,
        stack: ExitStack,
        port: int,
        panel_steps: dict[str, Callable[[MakeRun], None]] | None = None,
    ) -> None:
        self.directory = directory
        self.panel_steps = panel_steps or {}  # what the reader does in the panel before a file
        self.shell = shell
        self.stack = stack
        self.port = port
        self.serving: MakeRun | None = None
        self.serving_stack: ExitStack | None = None
        self.outputs: list[Block] = []

    def go(self, blocks: list[Block], label: str = "") -> None:
        """The blocks in order; with a label, its sessions alone."""
        for block in blocks:
            if block.kind == "session" and block.argument == label:
                self.shell.run_session(block)
            elif label:
                continue
            elif block.kind == "file":
                if block.argument in self.panel_steps:
                    assert self.serving is not None
                    self.panel_steps[block.argument](self.serving)
                self.save(block)
            elif block.kind == "make":
                for line in block.text.splitlines():
                    self.make(line.split("#")[0].strip(), block)
            elif block.kind == "output" and block.argument:
                self.background_printed(block)
            elif block.kind == "output":
                self.outputs.append(block)

    def save(self, block: Block) -> None:
        text = block.text
        for shown, actual in self.shell.replace.items():
            if shown in text:
                text = text.replace(shown, actual.format_map(self.shell.captured))
        (self.directory / block.argument).write_text(text + "\n")

    def background_printed(self, block: Block) -> None:
        """What the newest background command printed is the block (within 60 s)."""
        log = self.shell.home / f"background-{len(self.shell.background) - 1}.log"
        deadline = time.monotonic() + 60
        while output_match(block.text.splitlines(), log.read_text(), {}) is None:
            assert time.monotonic() < deadline, f"{block.where}: printed {log.read_text()!r}"
            time.sleep(0.5)

    def make(self, line: str, block: Block) -> None:
        if line == "make test":
            check_make_test(self.directory)
            return
        if self.serving_stack:
            self.serving_stack.close()
        for shown, actual in self.shell.replace.items():
            line = line.replace(shown, actual)
        self.serving_stack = self.stack.enter_context(ExitStack())
        self.serving = self.serving_stack.enter_context(
            make_run(line, self.directory, self.shell.env, self.port)
        )
        text = block.path.read_text(encoding="utf-8")
        # The URL and the login it prints are the doc's (on port 5000 there).
        assert self.serving.url.replace(str(self.port), "5000") in text
        assert f"`{self.serving.email}` / `{self.serving.password}`" in text, block.where
        assert "Demo Company" in self.serving.log_in().get(self.serving.url, timeout=30).text


def check_make_test(directory: Path) -> None:
    """`make test`'s recipe (`make -n`, nothing run) ends in the suite's pytest."""
    recipe = subprocess.run(
        ["make", "-n", "-f", str(ROOT / "Makefile"), "test", f"BIN={BIN}"],
        cwd=directory,
        env=as_typed(dict(os.environ)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert recipe[-1].startswith(f"{BIN}/python -m pytest -n 4 --dist loadgroup"), recipe
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def log_in(serving: MakeRun, email: str, password: str) -> requests.Session:
    serving.email, serving.password = email, password
    return serving.log_in()


def csrf_in(page: str) -> str:
    found = CSRF_META.search(page)
    assert found, page
    return found.group(1)


def run_page(serving: MakeRun, email: str, password: str, run_id: str) -> str:
    """The run's page, once the run has ended, as `email` sees it."""
    browser = log_in(serving, email, password)
    deadline = time.monotonic() + 60
    while True:
        page = html.unescape(browser.get(f"{serving.url}runs/{run_id}", timeout=30).text)
        if "Succeeded" in page or "succeeded" in page or time.monotonic() > deadline:
            return page
        time.sleep(0.5)


@pytest.mark.slow
def test_the_readme_quick_start_and_first_job(tmp_path: Path) -> None:
    directory = tmp_path / "checkout"
    directory.mkdir()
    checkout_stand_in(directory)
    env = reader_environment(SCHEDULER_INSTANCE_PATH=str(directory / "instance"))
    shell = Shell(directory, tmp_path, env, README_REPLACE, varies=README_VARIES)
    with ExitStack() as stack:
        walk = Walk(directory, shell, stack, free_port())
        walk.go(fenced_blocks(README))
        assert walk.serving is not None
        page = run_page(walk.serving, "admin@demo.example", "demo-password", shell.captured["run"])
    output = "7 days of demo's runs to ops@acme.example"
    assert output in README.read_text() and output in page and "succeeded" in page.lower()


@pytest.fixture
def empty_postgres(postgres_server: PostgresServer | str) -> Iterator[str]:
    """A new, empty PostgreSQL database (not migrated: the reader migrates it)."""
    server = require_postgres(postgres_server)
    name = server.create_database(migrated=False)
    try:
        yield server.sqlalchemy_url(name)
    finally:
        server.drop_database(name)


@pytest.mark.slow
def test_the_readme_production_steps(tmp_path: Path, empty_postgres: str) -> None:
    jobs = tmp_path / "acme-jobs"
    jobs.mkdir()
    (module,) = marked(README, "file", "acme_jobs.py")
    (jobs / "acme_jobs.py").write_text(module.text + "\n")
    port = free_port()
    env = reader_environment(
        SCHEDULER_INSTANCE_PATH=str(tmp_path / "instance"),
        SCHEDULER_BIND=f"127.0.0.1:{port}",
        WEB_CONCURRENCY="2",  # gunicorn's processes: 2 x CPUs + 1 by default
    )
    replace = {
        "postgresql://scheduler:secret@db.internal/scheduler": empty_postgres,
        # The checkout too: the tests import it by PYTHONPATH (CI installs it, so no harm).
        "/opt/acme-jobs": f"{jobs}{os.pathsep}{ROOT}",
        "127.0.0.1:8000": f"127.0.0.1:{port}",
    }
    typed = {f"read -rs {name}_PASSWORD": PASSWORD + "\n" for name in ("OPERATOR", "ADMIN")}
    shell = Shell(ROOT, tmp_path, env, replace, typed, PRODUCTION_VARIES)
    try:
        Walk(tmp_path, shell, ExitStack(), port).go(fenced_blocks(README), "production")
    finally:
        shell.close()
    assert len(shell.background) == 2
    assert all(process.returncode == 0 for process in shell.background)  # SIGTERM: clean exit


@pytest.mark.slow
def test_the_tutorial(tmp_path: Path, empty_postgres: str) -> None:
    directory = tmp_path / "checkout"
    directory.mkdir()
    checkout_stand_in(directory)
    port = free_port()
    env = reader_environment(SCHEDULER_INSTANCE_PATH=str(directory / "instance"))
    receiver = free_port()
    replace = {
        ".venv/bin/activate": f"{BIN}/activate",
        "postgresql://scheduler:secret@localhost/scheduler": empty_postgres,
        "127.0.0.1:5000": f"127.0.0.1:{port}",
        "/api/v1/runs/12": "/api/v1/runs/{run}",
        "127.0.0.1:8001": f"127.0.0.1:{receiver}",
        '("127.0.0.1", 8001)': f'("127.0.0.1", {receiver})',  # receiver.py's own
        SHOWN_SECRET: "{secret}",
    }
    typed = {"read -rs PAT_PASSWORD": PASSWORD + "\n"}
    shell = Shell(directory, tmp_path, env, replace, typed, TUTORIAL_VARIES)

    def set_webhook(serving: MakeRun) -> None:
        """Step 9 in the panel: pat saves the default webhook URL and reads the secret."""
        assert "`http://127.0.0.1:8001/hook`" in TUTORIAL.read_text()
        browser = log_in(serving, "pat@acme.example", PASSWORD)
        page = browser.get(serving.url + "settings/notifications", timeout=30).text
        form = {"notify_emails": "", "notify_webhook_url": f"http://127.0.0.1:{receiver}/hook"}
        form["csrf_token"] = csrf_in(page)
        saved = browser.post(serving.url + "settings/notifications", data=form, timeout=30)
        found = re.search(r'id="webhook-secret-value">([0-9a-f]{64})<', saved.text)
        assert saved.status_code == 200 and found, saved.text
        shell.captured["secret"] = found.group(1)

    with ExitStack() as stack:
        stack.callback(shell.close)
        walk = Walk(directory, shell, stack, port, {"receiver.py": set_webhook})
        walk.go(fenced_blocks(TUTORIAL))
        assert walk.serving is not None
        page = run_page(walk.serving, "pat@acme.example", PASSWORD, shell.captured["run"])
    (output,) = walk.outputs
    assert "succeeded" in page.lower()
    assert all(line in page for line in output.text.splitlines())


def module_of(path: Path, name: str) -> ModuleType:
    """The doc's file block `name`, imported as a module."""
    (block,) = marked(path, "file", name)
    spec = importlib.util.spec_from_loader(name.removesuffix(".py"), loader=None)
    assert spec
    module = importlib.util.module_from_spec(spec)
    exec(compile(block.text, block.where, "exec", dont_inherit=True), module.__dict__)
    return module


def test_the_readme_job_runs_through_its_catalog(
    job_context: Callable[..., JobContext], caplog: pytest.LogCaptureFixture
) -> None:
    catalog = module_of(README, "acme_jobs.py").catalog
    (default,) = catalog.defaults()
    summary = catalog.get(default.job)
    summary.parse_args(default.args)  # the default schedule passes its own check
    summary.call(job_context(tenant_slug="demo"), default.args)
    assert caplog.messages == ["7 days of demo's runs to ops@acme.example"]
    with pytest.raises(PermanentError, match=r"pat@example\.com is not an Acme address"):
        summary.call(job_context(tenant_slug="demo"), {"recipient": "pat@example.com"})


def test_the_tutorial_job_runs_through_its_catalog(
    job_context: Callable[..., JobContext], caplog: pytest.LogCaptureFixture
) -> None:
    greet = module_of(TUTORIAL, "greetings.py").catalog.get("greetings.greet")
    args: dict[str, Any] = {"name": "team", "times": 2, "language": "fr", "shout": True}
    greet.call(job_context(tenant_slug="acme"), args)
    assert caplog.messages == ["BONJOUR, TEAM! (FROM ACME)"] * 2
    assert [field.name for field in greet.form_fields()] == ["name", "times", "language", "shout"]
    with pytest.raises(Exception, match="times"):
        greet.parse_args({**args, "times": 6})


def test_shown_output_is_compared_line_by_line() -> None:
    shown = ["created tenant acme", "...", "run 58 queued for 2026-12-07T09:30:00Z", "a ... c"]
    varies = {"run 58 queued": r"run (?P<run>\d+) queued"}
    printed = "created  tenant\tacme\nINFO 1\nINFO 2\n"
    printed += "run 7 queued for 2026-12-06T13:41:57Z\na b c\n"
    assert output_match(shown, printed, varies) == {"run": "7"}
    assert output_match(shown, printed.replace("acme", "acne"), varies) is None
    assert output_match(shown, printed.replace("queued", "failed"), varies) is None
    assert output_match(shown, printed + "one line more\n", varies) is None
    assert output_match(["ok"], "ok\n", {}) == {} and output_match([], "", {}) == {}
