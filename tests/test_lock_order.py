"""One lock order: edits, pauses, resumes and Run now through the API race the tick (in this
process on an advancing clock, and in a real worker process) for half a minute on PostgreSQL, and
nobody loses a deadlock: no 500s, no aborted tick batch.

SQLite is left out: its writers take the one write lock up front (BEGIN IMMEDIATE), so they
queue and cannot deadlock."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from flask import Flask
from sqlalchemy import text, update
from sqlalchemy.exc import DBAPIError, OperationalError

from tests.api_helpers import NEW, Api
from tests.conftest import World
from tests.settings_support import reconfigure
from tests.worker_support import Workers, heavy_one_at_a_time, postgresql_only
from webapp.catalog.current import current_catalog
from webapp.config import settings
from webapp.database import TRIES, retry_lost_race, utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Tenant
from webapp.scheduler.tick import TickSettings, tick

pytestmark = [postgresql_only, heavy_one_at_a_time]

SECONDS = 30  # 350-400 of each change and 766 fired runs here at load 4: bounds 20 and 100
SCHEDULES = 4


def edits(app: Flask, api: Api, ids: list[int], until: float, answers: Counter[str]) -> None:
    """Edits, pauses, resumes and Run now on random schedules until `until`."""
    rng = random.Random()
    with app.app_context():
        while time.monotonic() < until:
            schedule_id = rng.choice(ids)
            url = f"/api/v1/schedules/{schedule_id}"
            action = rng.choice(("edit", "pause", "resume", "run"))
            if action == "edit":
                cron = rng.choice(("* * * * *", "*/2 * * * *", "0 * * * *"))
                answer = api.patch(url, json={"cron": cron, "name": f"Edited {rng.random()}"})
            elif action == "run":
                answer = api.post(f"{url}/runs", json={})
            else:
                answer = api.post(f"{url}/{action}")
            answers[f"{action} {answer.status_code}"] += 1


def ticks(app: Flask, until: float, failures: list[str], fired: Counter[str]) -> None:
    """The tick on a clock that moves a minute further each round, so that every schedule it
    can lock is due every time."""
    with app.app_context():
        catalog, tick_settings = current_catalog(), TickSettings.of(settings())
        now = utcnow()
        while time.monotonic() < until:
            now += timedelta(minutes=1)
            try:
                fired["runs"] += tick(db.session(), catalog, tick_settings, now).queued
            except Exception as error:  # a lost deadlock aborts the batch
                failures.append(repr(error))
                db.session.rollback()
        db.session.remove()


def test_edits_pauses_resumes_run_now_and_ticks_never_deadlock(
    app: Flask, world: World, workers: Workers
) -> None:
    reconfigure(app, SCHEDULER_API_RATE_LIMIT=0)
    app.testing = False  # an error is the 500 a client gets, as in production
    api = Api(app, world.alpha, world.alice)
    ids = []
    for n in range(SCHEDULES):
        answer = api.post(
            "/api/v1/schedules", json={**NEW, "name": f"Race {n}", "cron": "* * * * *"}
        )
        assert answer.status_code == 201, answer.get_json()
        ids.append(answer.get_json()["id"])
    worker = workers.start("--concurrency", "2")
    until = time.monotonic() + SECONDS
    answers: Counter[str] = Counter()
    failures: list[str] = []
    fired: Counter[str] = Counter()
    threads = [
        *(threading.Thread(target=edits, args=(app, api, ids, until, answers)) for _ in range(4)),
        *(threading.Thread(target=ticks, args=(app, until, failures, fired)) for _ in range(2)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS + 60)
    server_errors = {key: n for key, n in answers.items() if key.split()[1].startswith("5")}
    assert server_errors == {}, answers
    assert failures == [], failures[:5]
    # The race was run: every kind of change went through many times, and the ticks fired.
    for action in ("edit", "pause", "resume", "run"):
        done = sum(n for key, n in answers.items() if key.startswith(f"{action} 2"))
        assert done > 20, answers
    assert fired["runs"] > 100, fired
    assert worker.poll() is None, workers.logs()
    assert "deadlock detected" not in workers.logs()


RAISE_AS = "DO $$ BEGIN RAISE EXCEPTION 'raised by the test' USING ERRCODE = '{}'; END $$"


def test_a_transaction_that_loses_a_race_is_run_again_whole(app: Flask, world: World) -> None:
    """PostgreSQL's deadlock, serialization and unique-violation failures (raised by the server
    itself here) run the change again, up to TRIES times, each try from a rolled-back
    transaction; any other error is not retried."""
    tries: list[str] = []

    @retry_lost_race
    def rename(code: str | None, losses: int) -> None:
        with write_transaction(db.session) as session:
            tries.append(code or "")
            session.execute(update(Tenant).values(name=f"Renamed {len(tries)}"))
            if code is not None and len(tries) <= losses:
                session.execute(text(RAISE_AS.format(code)))

    for code in ("40P01", "40001"):
        tries.clear()
        rename(code, losses=TRIES - 1)
        assert len(tries) == TRIES
        assert db.session.get_one(Tenant, world.alpha.id).name == f"Renamed {TRIES}"
    tries.clear()
    with pytest.raises(OperationalError, match="raised by the test"):
        rename("40P01", losses=TRIES)
    assert len(tries) == TRIES
    tries.clear()
    rename("23505", losses=1)  # a unique violation: the second try finds the other's row
    assert len(tries) == 2
    tries.clear()
    with pytest.raises(DBAPIError, match="raised by the test"):
        rename("22012", losses=1)  # division_by_zero: no race, not tried again
    assert len(tries) == 1
    db.session.rollback()
    assert db.session.get_one(Tenant, world.alpha.id).name == "Renamed 2"
