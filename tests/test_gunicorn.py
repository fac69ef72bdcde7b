"""The panel in production: gunicorn with the shipped gunicorn.conf.py and two worker processes,
driven over real HTTP as a browser without JavaScript would (login, create, Run now)."""

from __future__ import annotations

import http.cookiejar
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import select

from tests.conftest import PASSWORD, World
from tests.panel_helpers import token_in
from tests.pg_cluster import free_port
from webapp.extensions import db
from webapp.models import Run, Schedule

PROJECT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).with_name("gunicorn")


def worker_pids(master: int) -> set[int]:
    """The processes gunicorn forked (their parent is the master)."""
    children = set()
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == master:
            children.add(int(status.parent.name))
    return children


@contextmanager
def gunicorn(database_url: str, instance: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    log = instance / "gunicorn.log"
    environment = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SECRET_KEY": "gunicorn-test-secret",
        "SESSION_COOKIE_SECURE": "false",  # plain HTTP on loopback, as `make run`
        "SCHEDULER_DEMO_JOBS": "1",
        "SCHEDULER_INSTANCE_PATH": str(instance),
        "SCHEDULER_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
        # gunicorn's control socket, in $HOME/.gunicorn/ by default: one of this test's own, or
        # two tests at once (pytest -n) would take each other's.
        "XDG_RUNTIME_DIR": str(instance),
    }
    with log.open("wb") as output:
        server = subprocess.Popen(
            [str(GUNICORN), "-c", str(PROJECT / "gunicorn.conf.py")],
            cwd=PROJECT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a loaded CI machine starts slowly
        while True:
            try:
                with urllib.request.urlopen(url + "/login", timeout=30) as answer:
                    if answer.status == 200 and len(worker_pids(server.pid)) == 2:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not come up:\n{log.read_text()}")
            time.sleep(0.2)
        yield url, server
    finally:
        server.terminate()
        server.wait(timeout=40)


class Browser:
    """Cookies and forms over plain HTTP: what a browser without JavaScript sends."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, path: str) -> tuple[str, str]:
        with self.opener.open(self.base + path, timeout=60) as answer:
            return answer.geturl(), answer.read().decode()

    def post(self, path: str, form: dict[str, str]) -> tuple[str, str]:
        data = urllib.parse.urlencode(form).encode()
        with self.opener.open(self.base + path, data=data, timeout=60) as answer:
            return answer.geturl(), answer.read().decode()


@pytest.mark.slow
def test_the_panel_serves_a_login_a_create_and_a_run_now_under_gunicorn(
    app: Flask, world: World, database_url: str, tmp_path: Path
) -> None:
    with gunicorn(database_url, tmp_path) as (url, server):
        assert len(worker_pids(server.pid)) == 2
        browser = Browser(url)
        _, login = browser.get("/login")
        landed, home = browser.post(
            "/login",
            {"email": "alice@example.com", "password": PASSWORD, "csrf_token": token_in(login)},
        )
        assert landed == url + "/" and "alice@example.com" in home

        _, form = browser.get("/schedules/new")
        landed, detail = browser.post(
            "/schedules/new",
            {
                "csrf_token": token_in(form, "meta"),
                "name": "Served by gunicorn",
                "job": "demo.echo",
                "args.message": "hello",
                "cron": "*/5 * * * *",
                "time_zone": "UTC",
                "misfire_policy": "fire_once",
                "overlap_policy": "allow",
                "active": "on",
            },
        )
        schedule_id = int(re.fullmatch(rf"{url}/schedules/(\d+)", landed).group(1))  # type: ignore[union-attr]
        assert "Served by gunicorn" in detail

        # Sessions live in the database: whichever process answers knows the login.
        for _ in range(6):
            assert "Served by gunicorn" in browser.get(f"/schedules/{schedule_id}")[1]
        browser.post(f"/schedules/{schedule_id}/run", {"csrf_token": token_in(detail, "meta")})

    db.session.expire_all()
    schedule = db.session.get(Schedule, schedule_id)
    assert schedule is not None and schedule.tenant_id == world.alpha.id
    runs = db.session.scalars(select(Run).where(Run.schedule_id == schedule_id)).all()
    assert [(run.trigger, run.status, run.requested_by) for run in runs] == [
        ("manual", "queued", world.alice.id)
    ]
    access_log = (tmp_path / "gunicorn.log").read_text()
    assert re.search(r'"POST /schedules/new HTTP/1.1" 303 \d+ \d+us', access_log), access_log
