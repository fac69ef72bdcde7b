"""The fixtures' promise: every test starts on a fresh database and the app's own settings, however
the test before it (on the same process, which `app` and `database_url` serve in turn) left them."""

from __future__ import annotations

import pytest
from flask import Flask
from flask_migrate import downgrade
from sqlalchemy import text

from tests.conftest import World, make_schedule
from tests.settings_support import reconfigure
from webapp.config import settings
from webapp.extensions import db
from webapp.models import Schedule

# One process runs both, in this order (pytest -n): the second sees what the first left.
pytestmark = pytest.mark.xdist_group("fixtures")


def test_a_test_that_leaves_rows_settings_statistics_and_an_old_schema_behind(
    app: Flask, world: World
) -> None:
    make_schedule(world.alpha)
    app.config["SESSION_COOKIE_NAME"] = "left-behind"
    reconfigure(app, SCHEDULER_MAX_RUNNING=1)
    db.session.execute(text("ANALYZE schedules"))
    db.session.commit()
    downgrade(revision="-1")


def test_the_next_test_starts_fresh(app: Flask, world: World) -> None:
    assert app.config["SESSION_COOKIE_NAME"] == "session"
    assert settings(app).SCHEDULER_MAX_RUNNING != 1
    assert world.alpha.id == 1  # ids start at 1 again
    assert make_schedule(world.alpha).id == 1
    assert db.session.query(Schedule).count() == 1
