"""Every page's read takes its tenant as an argument: two tenants in turn, with every cache
emptied first, each see only their own rows, whichever asks first.

A statement cached with the first tenant's id baked in would show that tenant's rows to the
second: these tests fail then in both orders, whatever ran before them.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
from flask import Flask

from tests.conftest import World
from tests.panel_helpers import ALPHA_SECRETS, Panel, Seeded, seed
from webapp.database import utcnow
from webapp.extensions import db
from webapp.services.audit import Actor
from webapp.services.schedules import run_now

BETA_SECRETS = (
    "Beta hourly ping",
    "beta-message",
    "beta-output",
    "Beta Ltd",
    "charlie@example.com",
)


def clear_every_cache() -> None:
    """Empties each functools cache of the app's modules and SQLAlchemy's compiled statements."""
    for name, module in list(sys.modules.items()):
        if name == "webapp" or name.startswith("webapp."):
            for value in list(vars(module).values()):
                # Asked of the type: a proxy (flask.g, request) answers nothing outside a request.
                if hasattr(type(value), "cache_clear"):
                    value.cache_clear()
    compiled = getattr(db.engine, "_compiled_cache", None)
    if compiled is not None:
        compiled.clear()


def pages(data: Seeded, tenant: str) -> list[str]:
    """The pages of one tenant's data: the lists, a schedule's and a run's page, a badge."""
    schedule, run = (
        (data.report, data.failed) if tenant == "alpha" else (data.beta_schedule, data.beta_run)
    )
    return [
        "/",
        "/?q=a",
        "/runs",
        f"/runs?schedule={schedule.id}",
        "/runs/schedule-options?schedule_q=a",
        "/upcoming",
        "/audit",
        f"/schedules/{schedule.id}",
        f"/runs/{run.id}",
        f"/runs/{run.id}/status",
    ]


@pytest.mark.parametrize("order", [("alpha", "beta"), ("beta", "alpha")])
def test_each_tenant_sees_only_its_own_rows_whichever_asks_first(
    app: Flask, world: World, order: tuple[str, str]
) -> None:
    data = seed(world)
    # A queued one-off of each tenant: Next runs and the schedule's page list it.
    later = utcnow() + timedelta(hours=2)
    run_now(data.report, Actor.for_user(world.alice), utcnow(), later)
    run_now(data.beta_schedule, Actor.for_user(world.charlie), utcnow(), later)
    users = {"alpha": world.alice, "beta": world.charlie}
    own = {"alpha": ALPHA_SECRETS, "beta": BETA_SECRETS}
    clear_every_cache()
    for tenant in order:
        other = "beta" if tenant == "alpha" else "alpha"
        panel = Panel(app, users[tenant])
        for path in pages(data, tenant):
            response = panel.get(path)
            assert response.status_code == 200, path
            text = response.get_data(as_text=True)
            leaked = [secret for secret in own[other] if secret in text]
            assert not leaked, f"{tenant} sees {leaked} on {path}"
        shown = panel.get("/").get_data(as_text=True) + panel.get("/runs").get_data(as_text=True)
        name = "Alpha nightly report" if tenant == "alpha" else "Beta hourly ping"
        assert name in shown
        for path in pages(data, other)[-3:]:  # the other tenant's schedule, run and badge
            assert panel.get(path).status_code == 404, path
