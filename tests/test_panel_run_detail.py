"""The run page: what a tenant learns of one run (who asked, where it ran, its key, when it is
retried) and of its failure (type, message, the job's own frames; never the server's traceback)."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from flask import Flask

from tests.api_helpers import Api
from tests.conftest import WorkerFactory, World, make_run
from tests.panel_helpers import Panel, Seeded, counted_statements, seed
from tests.scheduler_helpers import execute_leased
from webapp.extensions import db
from webapp.models import Run, Trigger
from webapp.scheduler.leases import lease_once
from webapp.services.audit import Actor
from webapp.services.schedules import ScheduleInput, create_schedule, run_now
from webapp.web.formatting import dom_id


def error_text(page: str, run: Run) -> str:
    found = re.search(rf'<pre class="log" id="{dom_id(run, "error")}"[^>]*>(.*?)</pre>', page, re.S)
    assert found, "no error on the page"
    return html.unescape(found.group(1))


def test_alice_sees_who_asked_where_it_ran_its_key_and_the_next_attempt(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    data: Seeded = seed(world)
    worker = make_worker(hostname="worker-7.example", pid=4242)
    run = run_now(data.report, Actor.for_user(world.alice), datetime.now(UTC))
    run.status, run.attempt, run.max_attempts, run.worker_id = "queued", 1, 3, None
    retry_at = datetime.now(UTC) + timedelta(minutes=5)
    run.available_at, run.error = retry_at, "attempt 1 failed: RuntimeError: flaky"
    ran = make_run(data.report, "succeeded", 10, worker_id=worker.id)
    db.session.commit()

    alice = Panel(app, world.alice)
    page = alice.get(f"/runs/{run.id}").get_data(as_text=True)
    assert "<dt>Requested by</dt><dd>alice@example.com</dd>" in page
    assert f'<code class="key">{run.idempotency_key}</code>' in page
    next_attempt = page.split(f'<dd id="{dom_id(run, "next-attempt")}">', 1)[1].split("</dd>")[0]
    assert retry_at.isoformat() in next_attempt
    ran_page = alice.get(f"/runs/{ran.id}").get_data(as_text=True)
    assert "<dt>Worker</dt><dd>worker-7.example (pid 4242)</dd>" in ran_page
    assert "Requested by" not in ran_page  # a scheduled run: nobody pressed Run now
    assert "Next attempt" not in ran_page

    charlie = Panel(app, world.charlie)
    for run_id in (run.id, ran.id):
        assert charlie.get(f"/runs/{run_id}").status_code == 404


def test_the_run_page_joins_rather_than_querying_per_detail(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    data = seed(world)
    worker = make_worker(hostname="worker-7.example", pid=4242)
    bare = make_run(data.report, "queued", 1)
    full = make_run(data.report, "failed", 2, trigger="manual", requested_by=world.alice.id)
    full.worker_id = worker.id
    db.session.commit()
    run_ids = (bare.id, full.id)
    alice = Panel(app, world.alice)
    counts = []
    for run_id in run_ids:
        with counted_statements() as statements:
            assert alice.get(f"/runs/{run_id}").status_code == 200
        counts.append(len([sql for sql in statements if sql != "BEGIN"]))
    # The login with its user, memberships and tenants in one statement, and the run with its
    # schedule, worker and requester in one statement (joined), whatever the run has.
    assert counts == [2, 2]


def test_a_run_requested_through_the_api_or_the_command_line_names_who_asked(
    app: Flask, world: World
) -> None:
    data: Seeded = seed(world)
    api = Api(app, world.alpha, world.alice)
    answer = api.post(f"/api/v1/schedules/{data.report.id}/runs", json={})
    assert answer.status_code == 201, answer.get_json()
    by_token = answer.get_json()["id"]
    by_cli = run_now(data.report, Actor.cli(), datetime.now(UTC)).id
    alice = Panel(app, world.alice)
    page = alice.get(f"/runs/{by_token}").get_data(as_text=True)
    # Before: "Requested by -" (no user pressed it).
    assert f"<dt>Requested by</dt><dd>token {api.token.prefix} (write token)</dd>" in page
    page = alice.get(f"/runs/{by_cli}").get_data(as_text=True)
    assert "<dt>Requested by</dt><dd>cli</dd>" in page


def test_lag_counts_from_when_a_run_was_meant_to_start(app: Flask, world: World) -> None:
    """A backfill was meant to start when it was queued, a jittered fire at its fire time plus
    its share, a retry after its backoff; a fire that a late tick queued, at its fire time."""
    data: Seeded = seed(world)
    now = datetime.now(UTC).replace(microsecond=0)
    fired = now - timedelta(days=3)
    queued = now - timedelta(minutes=1)
    started = queued + timedelta(seconds=2)

    def ran(trigger: Trigger, scheduled: datetime, available: datetime) -> Run:
        return make_run(
            data.report,
            "succeeded",
            trigger=trigger,
            scheduled_for=scheduled,
            queued_at=queued,
            available_at=available,
            started_at=started,
            finished_at=started + timedelta(seconds=1),
        )

    backfilled = ran("backfill", fired, queued)  # a fire time 3 days ago, queued a minute ago
    jittered = ran("schedule", queued, queued + timedelta(seconds=1.5))  # started 0.5 s late
    late_tick = ran("schedule", queued - timedelta(seconds=8), queued)  # queued 8 s late
    db.session.commit()
    alice = Panel(app, world.alice)
    expected = {backfilled: "2.0 s", jittered: "500 ms", late_tick: "10.0 s"}  # before: 72 h
    for run, lag in expected.items():
        page = alice.get(f"/runs/{run.id}").get_data(as_text=True)
        assert re.search(rf"<dt>Lag</dt><dd[^>]*>{lag}</dd>", page), (run.trigger, lag)
    history = alice.get(f"/runs?schedule={data.report.id}").get_data(as_text=True)
    for run, lag in expected.items():
        row = history.split(f'<tr id="run-{run.id}"', 1)[1].split("</tr>", 1)[0]
        assert f'data-label="Lag">{lag}</td>' in row, (run.trigger, lag)


def test_a_failed_run_shows_the_error_type_message_and_job_frames_but_no_server_traceback(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    worker = make_worker(hostname="worker-7.example", pid=4242)
    alice = Actor.for_user(world.alice)
    failing = ScheduleInput(
        name="Fails", job="demo.fail", args={"message": "disk full"}, cron="@daily", time_zone="UTC"
    )
    schedule = create_schedule(world.alpha, failing, alice, datetime.now(UTC))
    run_now(schedule, alice, datetime.now(UTC))
    (leased,) = lease_once(db.session(), worker.id, None, timedelta(seconds=60), 1)
    execute_leased(leased, worker.id)
    run = db.session.get(Run, leased.id)
    assert run is not None and run.status == "failed"

    page = Panel(app, world.alice).get(f"/runs/{run.id}").get_data(as_text=True)
    shown = error_text(page, run)
    assert re.fullmatch(
        r"RuntimeError: disk full\n  webapp\.catalog\.builtin, line \d+, in fail", shown
    )
    assert "/" not in shown and "Traceback (most recent call last)" not in page
    # The operators' column keeps everything, and no page shows it.
    assert run.error_detail is not None
    assert run.error_detail.startswith("Traceback (most recent call last)")
    assert "webapp/scheduler/execution.py" in run.error_detail
    assert "execution.py" not in page
