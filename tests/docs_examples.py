"""Runs the README's and the tutorial's examples as written (tests/test_docs_examples.py).

A fenced block is preceded by an HTML comment, invisible on GitHub and in MkDocs, that says
what the test does with it:

- `<!-- example: session [LABEL] -->`: a shell session. Each `$ ` line (with its `\\`
  continuations) runs in bash, one after another, with the variables that earlier lines set;
  its exit status must be 0, and what it prints (stdout and stderr together) must be the lines
  shown under it, compared by `output_matches`.
- `<!-- example: make -->`: lines of `make` (`make run`, `make test`), see `make_run`.
- `<!-- example: file NAME -->`: a file the reader saves as NAME; the test writes it there.
- `<!-- example: output -->`: a run's output as the panel shows it; the test compares it.
- `<!-- example: output NAME -->`: what a command started in the background (`... &`) prints.
- `<!-- not executed: REASON -->`: shown, not run, for the reason given.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the virtualenv the tests run in: `flask`, `gunicorn`, ...
MARK = re.compile(r"<!-- (example|not executed): (.+?) -->")
FENCE = re.compile(r"^```")
# An RFC 3339 time (as the CLI and the API print them): any such time matches any other.
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"
SHOWN_TIME = re.compile(TIME)
CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')
# What a `make` inherits from the `make test` it runs under: without them, a make these tests
# start runs as the reader's would (a sub-make prints "make[1]: Entering directory ...").
SUB_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")


def as_typed(env: dict[str, str]) -> dict[str, str]:
    """`env` without what an enclosing make passes down (SUB_MAKE)."""
    return {name: value for name, value in env.items() if name not in SUB_MAKE}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    kind: str  # "session", "make", "file", "output", or "not executed"
    argument: str  # a session's label, a file's name, the reason it is not executed
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of a markdown file, with the mark on the line before it (an
    unmarked block has kind "")."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        if not FENCE.match(lines[index]):
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        mark = MARK.fullmatch(lines[index - 1].strip()) if index else None
        kind, argument = "", ""
        if mark and mark.group(1) == "example":
            kind, _, argument = mark.group(2).partition(" ")
        elif mark:
            kind, argument = "not executed", mark.group(2)
        blocks.append(Block(path, index + 1, kind, argument, "\n".join(lines[index + 1 : end])))
        index = end + 1
    return blocks


@dataclass(frozen=True)
class Step:
    command: str
    shown: list[str]  # the output shown under it


def session_steps(text: str) -> list[Step]:
    """A session's commands (`$ ` lines, joined with their `\\` continuations) and the output
    lines shown under each."""
    steps: list[Step] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        assert line.startswith("$ "), f"a session starts with a command, not {line!r}"
        command = line[2:]
        while command.endswith("\\"):
            index += 1
            command = command[:-1] + "\n" + lines[index]
        index += 1
        shown = []
        while index < len(lines) and not lines[index].startswith("$ "):
            shown.append(lines[index])
            index += 1
        steps.append(Step(command, shown))
    return steps


def output_match(shown: list[str], printed: str, varies: dict[str, str]) -> dict[str, str] | None:
    """Whether `printed` is the output `shown` (None if not), line by line, with runs of spaces
    and tabs taken as one space. A shown line `...` stands for any lines (none included), and `...`
    within a line for any text; a time stands for any time (TIME); each key of `varies` (a
    literal of the shown output) stands for what its regular expression matches. The answer
    holds what the expressions' named groups matched (a run's id, for later commands)."""
    literals = sorted(varies, key=len, reverse=True)
    special = re.compile("|".join([*map(re.escape, literals), r"\.\.\.", TIME]))
    pattern = ""
    for line in shown:
        line = " ".join(line.split())
        if line == "...":
            pattern += r"(?:[^\n]*\n)*?"
            continue
        parts, last = [], 0
        for piece in special.finditer(line):
            parts.append(re.escape(line[last : piece.start()]))
            text = piece.group()
            parts.append(varies.get(text) or (".*?" if text == "..." else TIME))
            last = piece.end()
        pattern += "".join(parts) + re.escape(line[last:]) + r"\n"
    actual = "".join(" ".join(line.split()) + "\n" for line in printed.splitlines())
    found = re.fullmatch(pattern, actual)
    return None if found is None else found.groupdict()


@dataclass
class Shell:
    """A reader's terminal: bash in `cwd`, with the variables earlier commands set (kept in a
    file between commands: `set -a` exports every assignment, `export -p` saves them).

    `replace` maps text of the shown commands to what the test runs instead (a URL of the
    reader's database becomes the test's database), formatted with what earlier outputs
    captured (`{run}`). `stdin`
    maps a command to what the reader types at it. A command ending in `&` runs in the
    background until `close`; while one has started, each later command is retried (up to 60
    s) until it prints what is shown, as a reader waits for a server to come up."""

    cwd: Path
    home: Path  # the test's own files: the variables, the background commands' output
    env: dict[str, str]
    replace: dict[str, str] = field(default_factory=dict)
    stdin: dict[str, str] = field(default_factory=dict)
    varies: dict[str, str] = field(default_factory=dict)
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    printed: list[str] = field(default_factory=list)  # what each command printed, in order
    captured: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = self.home / "variables.sh"
        self.state.write_text("")

    def run_session(self, block: Block) -> None:
        for step in session_steps(block.text):
            self.run(step, block)

    def run(self, step: Step, block: Block) -> None:
        command = step.command
        for shown, actual in self.replace.items():
            if shown in command:
                command = command.replace(shown, actual.format_map(self.captured))
        if command.startswith("pip install "):
            self.printed.append("")
            check_pip_install(command)
            return
        if command.endswith("&"):
            self.start(command[:-1].strip())
            return
        deadline = time.monotonic() + (60 if self.background else 0)
        while True:
            status, printed = self.execute(command, self.stdin.get(step.command, ""))
            matched = output_match(step.shown, printed, self.varies) if status == 0 else None
            if matched is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.printed.append(printed)
        assert status == 0, f"{block.where}: `{step.command}` exited {status}:\n{printed}"
        shown = "\n".join(step.shown)
        self.captured.update(matched or {})
        assert matched is not None, (
            f"{block.where}: `{step.command}` printed\n{printed}\nnot\n{shown}"
        )

    def script(self, command: str) -> str:
        return f"set -a\n. {shlex.quote(str(self.state))}\n{command}"

    def execute(self, command: str, typed: str) -> tuple[int, str]:
        # Saved whole, then renamed: a background command started just before may still be
        # reading the file (bash starts later than Popen returns), and a file truncated under
        # it gave a tutorial's receiver none of the variables (WEBHOOK_SECRET).
        state, new = shlex.quote(str(self.state)), shlex.quote(f"{self.state}.new")
        save = f"\nstatus=$?\nexport -p > {new}\nmv -f {new} {state}\nexit $status"
        result = subprocess.run(
            ["bash", "-c", self.script(command) + save],
            cwd=self.cwd,
            env=self.env,
            input=typed.encode(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=180,
        )
        return result.returncode, result.stdout.decode()

    def start(self, command: str) -> None:
        log = self.home / f"background-{len(self.background)}.log"
        with log.open("wb") as output:
            self.background.append(
                subprocess.Popen(
                    ["bash", "-c", self.script("exec " + command)],
                    cwd=self.cwd,
                    env=self.env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def close(self) -> None:
        for process in self.background:
            stop_group(process, signal.SIGTERM)


def stop_group(process: subprocess.Popen[bytes], sent: signal.Signals) -> None:
    """Sends `sent` to the process's group (as a terminal does) and waits for it to end."""
    try:
        os.killpg(process.pid, sent)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=120)  # `flask serve` waits up to 60 s for its worker
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        raise
    # The rest of its group too (a worker `flask serve` gave up on): one left behind would hold
    # the output pipe open, and the test would wait for the end of its output for good.
    deadline = time.monotonic() + 30
    while True:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError(f"a process of the group outlived {sent.name} by 30 s")
        time.sleep(0.1)


def check_pip_install(command: str) -> None:
    """`pip install '.[extra,...]'` is not run (it needs the package index;
    tests/test_packaging.py installs the checkout for real): each extra it names must be
    declared in pyproject.toml, and what the extra requires installed in the tests' virtualenv."""
    (target,) = shlex.split(command)[2:]
    found = re.fullmatch(r"\.\[([\w,]+)\]", target)
    assert found, f"not a checkout's install: {command}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = extras["optional-dependencies"]
    for extra in found.group(1).split(","):
        assert extra in declared, f"no extra {extra!r} in pyproject.toml"
        for requirement in declared[extra]:
            name = re.split(r"[\[<>=~ ;]", requirement, maxsplit=1)[0]
            try:
                distribution(name)
            except PackageNotFoundError:  # pragma: no cover - a failure's message
                raise AssertionError(f"{extra} requires {name}, which is not installed") from None


@dataclass
class MakeRun:
    """A `make run` serving: its URL and the login it printed."""

    process: subprocess.Popen[bytes]
    url: str
    email: str
    password: str
    lines: list[str]

    def log_in(self) -> requests.Session:
        """Logs in with the printed login, as a person does at the printed URL."""
        browser = requests.Session()
        page = browser.get(self.url + "login", timeout=30)
        found = CSRF_META.search(page.text)
        assert found, page.text
        form = {"email": self.email, "password": self.password, "csrf_token": found.group(1)}
        landed = browser.post(self.url + "login", data=form, timeout=30)
        assert landed.status_code == 200 and landed.url == self.url, landed.url
        return browser


def checkout_stand_in(directory: Path) -> None:
    """`directory` as the checkout `make run` runs in, with its virtualenv already made:
    pyproject.toml (on which the venv's stamp depends) and a stamp newer than it. What
    .venv/.runtime's recipe does (pip install -e .) needs the package index: the tests' own
    virtualenv (BIN) stands in for .venv."""
    (directory / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    (directory / "venv").mkdir()
    (directory / "venv" / ".runtime").touch()


@contextmanager
def make_run(line: str, directory: Path, env: dict[str, str], port: int) -> Iterator[MakeRun]:
    """Runs the documented `[VAR=value ...] make run` itself, in `directory` (a
    `checkout_stand_in`, on which `env`'s SCHEDULER_INSTANCE_PATH names the instance folder),
    with PORT, VENV and BIN given on its command line; waits for the URL and login it prints,
    and ends it as Ctrl-C does (SIGINT to its process group: make, the panel and its worker)."""
    *assignments, make, target = shlex.split(line)
    assert (make, target) == ("make", "run"), line
    given = dict(assignment.split("=", 1) for assignment in assignments)
    command = ["make", "-f", str(ROOT / "Makefile"), "run", f"PORT={port}"]
    command += [f"VENV={directory / 'venv'}", f"BIN={BIN}"]
    process = subprocess.Popen(
        command,
        cwd=directory,
        env=as_typed({**env, **given}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=read_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        login = wait_for_line(process, lines, r"\s*Log in as (\S+) / (\S+) .*")
        url = next(line for line in lines if "Scheduler panel:" in line).split()[-1]
        yield MakeRun(process, url, login.group(1), login.group(2), lines)
    finally:
        try:
            stop_group(process, signal.SIGINT)
        except subprocess.TimeoutExpired as slow:
            output = "\n".join(lines)
            raise AssertionError(f"make run did not end on Ctrl-C:\n{output}") from slow
        finally:
            reader.join(timeout=10)
            process.stdout.close()  # also when it failed: left open, a later test gets its warning


def read_lines(stream: object, lines: list[str]) -> None:
    for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
        lines.append(raw.decode().rstrip("\n"))


def wait_for_line(
    process: subprocess.Popen[bytes], lines: list[str], pattern: str
) -> re.Match[str]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for line in list(lines):
            found = re.fullmatch(pattern, line)
            if found:
                return found
        assert process.poll() is None, "make run ended:\n" + "\n".join(lines)
        time.sleep(0.2)
    raise AssertionError("make run printed no login:\n" + "\n".join(lines))
