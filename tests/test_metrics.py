"""/metrics: the figures of a hand-built state, behind the token, in a bounded number of queries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert
from werkzeug.test import TestResponse

from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import counted_statements
from tests.settings_support import reconfigure
from webapp.config import settings
from webapp.extensions import db
from webapp.models import Notification, Run, RunStatus, Trigger, Worker
from webapp.services import metrics

TOKEN = "s3cret-metrics-token"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}

Figures = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def metrics_app(app: Flask) -> Flask:
    reconfigure(app, SCHEDULER_METRICS_TOKEN=TOKEN)
    return app


def scrape(app: Flask) -> Figures:
    response = app.test_client().get("/metrics", headers=AUTHORIZED)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type.startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
    }


def page(response: TestResponse) -> str:
    """The page without its CSRF tokens: signed with the time, they change from second to second."""
    body = response.get_data(as_text=True)
    return re.sub(r'(name="csrf[-_]token" (?:content|value)=)"[^"]*"', r"\1...", body)


def figure(figures: Figures, name: str, **labels: str) -> float:
    return figures[(name, tuple(sorted(labels.items())))]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"Authorization": f"Bearer {TOKEN}x"},
    ],
    ids=["none", "wrong", "basic", "no-scheme", "longer"],
)
def test_without_the_right_token_it_answers_like_an_unknown_url(
    metrics_app: Flask, headers: dict[str, str]
) -> None:
    client = metrics_app.test_client()
    unknown = client.get("/no-such-page")  # first: its session holds the page's CSRF token
    answer = client.get("/metrics", headers=headers)
    assert answer.status_code == unknown.status_code == 404
    assert page(answer) == page(unknown)
    assert "scheduler_" not in answer.get_data(as_text=True)
    assert "Set-Cookie" not in answer.headers


def test_without_a_configured_token_even_an_empty_bearer_is_refused(app: Flask) -> None:
    assert settings(app).SCHEDULER_METRICS_TOKEN == ""
    client = app.test_client()
    unknown = client.get("/no-such-page")
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer"}):
        answer = client.get("/metrics", headers=headers)
        assert (answer.status_code, page(answer)) == (404, page(unknown))


def test_with_the_token_it_needs_no_session_and_sets_no_cookie(metrics_app: Flask) -> None:
    response = metrics_app.test_client().get("/metrics", headers=AUTHORIZED)
    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers
    assert response.headers["Cache-Control"] == "no-store"


def test_it_exports_the_figures_of_the_whole_system(metrics_app: Flask, world: World) -> None:
    now = datetime.now(UTC)
    minutes = lambda n: now - timedelta(minutes=n)  # noqa: E731
    overdue = make_schedule(world.alpha, "overdue", minutes(10))
    later = make_schedule(world.beta, "later", now + timedelta(hours=1))
    make_schedule(world.beta, "paused", minutes(60), active=False)
    # The queue: three may start (one for longer than the 300 s grace), one waits for later.
    make_run(overdue, "queued", scheduled_for=minutes(1))
    make_run(overdue, "queued", scheduled_for=minutes(2))
    make_run(overdue, "queued", scheduled_for=minutes(10))
    make_run(later, "queued", scheduled_for=now + timedelta(minutes=30), trigger="manual")
    # Two leases, one lapsed. Lags 1.5 s and 20 s.
    make_run(
        later,
        "running",
        scheduled_for=minutes(3),
        started_at=minutes(3) + timedelta(seconds=1.5),
        locked_until=now + timedelta(minutes=1),
    )
    make_run(
        later,
        "running",
        scheduled_for=minutes(4),
        started_at=minutes(4) + timedelta(seconds=20),
        locked_until=now - timedelta(seconds=5),
    )
    # Finished in the window: durations 0.3 s, 7 s and 7 s; lags 1.5 s each.
    finished: list[tuple[RunStatus, float]] = [("succeeded", 0.3), ("succeeded", 7), ("failed", 7)]
    for n, (outcome, took) in enumerate(finished):
        start = minutes(5 + n) + timedelta(seconds=1.5)
        make_run(
            overdue,
            outcome,
            scheduled_for=minutes(5 + n),
            started_at=start,
            finished_at=start + timedelta(seconds=took),
        )
    make_run(overdue, "skipped", scheduled_for=minutes(8), started_at=None, finished_at=minutes(8))
    # Long before the window: in no recent figure.
    make_run(
        overdue,
        "failed",
        scheduled_for=minutes(120),
        started_at=minutes(120),
        finished_at=minutes(119),
    )
    db.session.add_all(
        [
            Worker(hostname="a", pid=1, concurrency=4, last_heartbeat_at=now),
            Worker(hostname="b", pid=2, concurrency=8, last_heartbeat_at=minutes(10)),
            Worker(hostname="c", pid=3, last_heartbeat_at=minutes(1), stopped_at=minutes(1)),
            Worker(hostname="d", pid=4, last_heartbeat_at=now - timedelta(days=3)),
        ]
    )
    for status in ("pending", "failed", "sent"):
        db.session.add(
            Notification(
                tenant_id=world.alpha.id,
                event="failure",
                channel="email",
                target="ops@example.com",
                subject="s",
                body="b",
                idempotency_key=f"n-{status}",
                status=status,
            )
        )
    db.session.commit()

    figures = scrape(metrics_app)

    expected = {
        ("scheduler_runs", "status", "queued"): 4,
        ("scheduler_runs", "status", "running"): 2,
        ("scheduler_recent_runs", "status", "succeeded"): 2,
        ("scheduler_recent_runs", "status", "failed"): 1,
        ("scheduler_recent_runs", "status", "skipped"): 1,
        ("scheduler_recent_fires", "trigger", "schedule"): 9,
        ("scheduler_recent_fires", "trigger", "manual"): 1,
        ("scheduler_recent_fires", "trigger", "catchup"): 0,
        ("scheduler_workers", "state", "alive"): 1,
        ("scheduler_workers", "state", "stale"): 1,
        ("scheduler_recent_notifications", "status", "failed"): 1,
        ("scheduler_recent_notifications", "status", "sent"): 1,
        ("scheduler_recent_notifications", "status", "suppressed"): 0,
    }
    for (name, label, value), count in expected.items():
        assert figure(figures, name, **{label: value}) == count, (name, value)
    assert figure(figures, "scheduler_queue_depth") == 3
    assert 595 <= figure(figures, "scheduler_queue_oldest_age_seconds") <= 660
    assert figure(figures, "scheduler_queued_runs_overdue") == 1
    assert figure(figures, "scheduler_leases_held") == 2
    assert figure(figures, "scheduler_leases_expired") == 1
    assert figure(figures, "scheduler_schedules_overdue") == 1
    assert 595 <= figure(figures, "scheduler_dispatch_lag_seconds") <= 660
    assert figure(figures, "scheduler_worker_slots") == 4
    assert figure(figures, "scheduler_notifications_pending") == 1

    lag = "scheduler_recent_run_lag_seconds"
    assert figure(figures, f"{lag}_bucket", le="1.0") == 0
    assert figure(figures, f"{lag}_bucket", le="2.0") == 4
    assert figure(figures, f"{lag}_bucket", le="30.0") == 5
    assert figure(figures, f"{lag}_bucket", le="+Inf") == 5
    assert figure(figures, f"{lag}_gcount") == 5
    assert figure(figures, f"{lag}_gsum") == pytest.approx(4 * 1.5 + 20, abs=0.01)
    duration = "scheduler_recent_run_duration_seconds"
    assert figure(figures, f"{duration}_bucket", le="0.1") == 0
    assert figure(figures, f"{duration}_bucket", le="0.5") == 1
    assert figure(figures, f"{duration}_bucket", le="5.0") == 1
    assert figure(figures, f"{duration}_bucket", le="10.0") == 3
    assert figure(figures, f"{duration}_bucket", le="+Inf") == 3
    assert figure(figures, f"{duration}_gsum") == pytest.approx(14.3, abs=0.01)


def test_recent_figures_read_only_the_newest_runs(
    metrics_app: Flask, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = make_schedule(world.alpha, "often", datetime.now(UTC) + timedelta(hours=1))
    now = datetime.now(UTC)
    for n in range(5):
        at = now - timedelta(minutes=n + 1)
        make_run(
            schedule,
            "succeeded",
            scheduled_for=at,
            started_at=at,
            finished_at=at + timedelta(seconds=1),
        )
    db.session.commit()
    monkeypatch.setattr(metrics, "RECENT_RUNS_LIMIT", 2)
    figures = scrape(metrics_app)
    assert figure(figures, "scheduler_recent_runs", status="succeeded") == 2


def test_the_lag_histogram_counts_from_when_runs_were_meant_to_start(
    metrics_app: Flask, world: World
) -> None:
    """A backfill of fire times days ago, started half a second after it was meant to: half a
    second of lag, not days (a lag alert would fire); a jittered fire, half a second after its
    share of the jitter. (Not a whole second: SQLite's julianday arithmetic may make 1 s a hair
    more, and the lag would fall into the next bucket.)"""
    schedule = make_schedule(world.alpha, "filled", datetime.now(UTC) + timedelta(hours=1))
    queued = datetime.now(UTC) - timedelta(minutes=2)
    started = queued + timedelta(seconds=3.5)
    runs: list[tuple[Trigger, datetime, datetime]] = [
        ("backfill", queued - timedelta(days=3), queued + timedelta(seconds=3)),
        ("schedule", queued, queued + timedelta(seconds=3)),
    ]
    for trigger, fired, available in runs:  # still running: only the lag is counted
        make_run(
            schedule,
            "running",
            trigger=trigger,
            scheduled_for=fired,
            queued_at=queued,
            available_at=available,
            started_at=started,
        )
    db.session.commit()
    figures = scrape(metrics_app)
    lag = "scheduler_recent_run_lag_seconds"
    assert figure(figures, f"{lag}_bucket", le="1.0") == 2
    assert figure(figures, f"{lag}_gsum") == pytest.approx(1.0, abs=0.01)


def test_a_scrape_costs_the_same_statements_with_few_or_many_runs(
    metrics_app: Flask, world: World
) -> None:
    schedule = make_schedule(world.alpha, "busy", datetime.now(UTC) - timedelta(hours=1))
    with counted_statements() as empty:
        scrape(metrics_app)
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = [
        {
            "tenant_id": world.alpha.id,
            "schedule_id": schedule.id,
            "job": "demo.echo",
            "args": {},
            "trigger": "schedule",
            "scheduled_for": now - timedelta(seconds=n),
            "idempotency_key": f"bulk-{n}",
            "status": ("queued", "running", "succeeded", "failed")[n % 4],
            "queued_at": now - timedelta(seconds=n),
            "available_at": now - timedelta(seconds=n),
            "started_at": now - timedelta(seconds=n) if n % 4 else None,
            "finished_at": now if n % 4 > 1 else None,
            "locked_until": now if n % 4 == 1 else None,
        }
        for n in range(2000)
    ]
    db.session.execute(insert(Run), rows)
    db.session.add_all(Worker(hostname=f"w{n}", pid=n, last_heartbeat_at=now) for n in range(50))
    db.session.commit()
    with counted_statements() as full:
        figures = scrape(metrics_app)
    assert figure(figures, "scheduler_runs", status="queued") == 500
    assert len(full) == len(empty) <= 10, full
