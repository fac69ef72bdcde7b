"""The operator role and area: the CLI flags, 404 for everyone else, the tenants page's counts,
a read-only view of any tenant, the workers page and releasing a dead worker's lease."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from threading import Event

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select

from tests.conftest import PASSWORD, World, make_run, make_schedule
from tests.panel_helpers import Panel, log_in
from webapp import release
from webapp.catalog.current import current_catalog
from webapp.extensions import db
from webapp.models import AuditEvent, Membership, Run, User, Worker
from webapp.scheduler.pool import ThreadJobPool
from webapp.scheduler.worker import WorkerProcess

OPERATOR = "olga@example.com"


@pytest.fixture
def olga(world: World, password_hash: str) -> User:
    """An operator who is a member of no tenant."""
    user = User(email=OPERATOR, password_hash=password_hash, is_operator=True)
    db.session.add(user)
    db.session.commit()
    return user


def audit_rows(action: str) -> list[AuditEvent]:
    query = select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.id)
    return list(db.session.scalars(query))


def get_run(run_id: int) -> Run:
    db.session.expire_all()
    run = db.session.get(Run, run_id)
    assert run is not None
    return run


# --- the command line ---------------------------------------------------------------------------


def test_user_create_with_operator_makes_an_operator_and_audits_it(
    cli: FlaskCliRunner, world: World
) -> None:
    result = cli.invoke(
        args=[
            *("user", "create", "dave@example.com", "--tenant", "alpha", "--role", "viewer"),
            *("--operator", "--password-stdin"),
        ],
        input=PASSWORD + "\n",
    )
    assert result.exit_code == 0, result.output
    assert result.output == "created user dave@example.com: viewer of alpha, operator\n"
    dave = db.session.scalar(select(User).where(User.email == "dave@example.com"))
    assert dave is not None and dave.is_operator
    (row,) = audit_rows("user.set_operator")
    assert (row.tenant_id, row.actor_label, row.object_id) == (None, "cli", dave.id)
    assert (row.before, row.after) == ({"is_operator": False}, {"is_operator": True})


def test_user_set_operator_grants_and_takes_away_the_role(
    cli: FlaskCliRunner, world: World
) -> None:
    result = cli.invoke(args=["user", "set-operator", "Alice@Example.com"])
    assert result.exit_code == 0, result.output
    assert result.output == "alice@example.com is now an operator\n"
    db.session.refresh(world.alice)
    assert world.alice.is_operator
    result = cli.invoke(args=["user", "set-operator", "alice@example.com", "--no-operator"])
    assert result.exit_code == 0, result.output
    assert result.output == "alice@example.com is no longer an operator\n"
    db.session.refresh(world.alice)
    assert not world.alice.is_operator
    rows = audit_rows("user.set_operator")
    assert [(r.tenant_id, r.actor_label, r.after) for r in rows] == [
        (None, "cli", {"is_operator": True}),
        (None, "cli", {"is_operator": False}),
    ]


def test_user_set_operator_refuses_an_unknown_email(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["user", "set-operator", "nobody@example.com"])
    assert result.exit_code == 1
    assert result.output == "Error: no user 'nobody@example.com'\n"
    assert audit_rows("user.set_operator") == []


# --- who may enter ------------------------------------------------------------------------------


def test_the_operator_area_is_404_for_tenant_users_get_and_post(
    app: Flask, world: World, olga: User
) -> None:
    worker = Worker(hostname="host-a", pid=1)
    db.session.add(worker)
    schedule = make_schedule(world.alpha, "Alpha echo", by=world.alice, cron="*/5 * * * *")
    run = make_run(schedule, "running", worker_id=worker.id, locked_until=datetime.now(UTC))
    db.session.commit()
    gets = ["/operator", "/operator/workers"]
    posts = [
        f"/operator/tenants/{world.alpha.id}/view",
        f"/operator/tenants/{world.beta.id}/view",
        "/operator/view/end",
        f"/operator/workers/{worker.id}/runs/{run.id}/release",
    ]
    # As docs/how-to/monitoring.md says: 404, not a redirect to the login.
    anonymous = app.test_client()
    for url in gets:
        assert anonymous.get(url).status_code == 404, url
    for user in (world.alice, world.bob, world.charlie):
        panel = Panel(app, user)
        for url in gets:
            for htmx in (False, True):
                assert panel.get(url, htmx=htmx).status_code == 404, (user.email, url)
        for url in posts:
            assert panel.post(url).status_code == 404, (user.email, url)
        assert "/operator" not in panel.get("/").get_data(as_text=True)
    assert get_run(run.id).status == "running"
    assert audit_rows("operator.viewed_tenant") == []
    operator = Panel(app, olga)
    assert 'href="/operator"' in operator.get("/operator").get_data(as_text=True)


def test_an_operator_without_a_tenant_lands_on_the_operator_area(
    app: Flask, world: World, olga: User
) -> None:
    client = app.test_client()
    response = log_in(client, OPERATOR)
    assert response.status_code == 303
    response = client.get(response.headers["Location"])
    assert (response.status_code, response.headers["Location"]) == (303, "/operator")
    page = client.get("/operator").get_data(as_text=True)
    assert "Alpha Corp" in page and "Beta Ltd" in page


# --- the tenants page ---------------------------------------------------------------------------


def tenant_counts(page: str, tenant_id: int) -> dict[str, int]:
    row = re.search(rf'<tr id="tenant-{tenant_id}">(.*?)</tr>', page, re.S)
    assert row, f"no row for tenant {tenant_id}"
    cells = re.findall(r'data-count="([a-z-]+)">(?:<span[^>]*>)?(\d+)', row.group(1))
    return {name: int(value) for name, value in cells}


def test_the_tenants_page_counts_schedules_failures_and_what_is_overdue(
    app: Flask, world: World, olga: User
) -> None:
    now = datetime.now(UTC)
    report = make_schedule(world.alpha, "Alpha report", by=world.alice, cron="0 * * * *")
    late = make_schedule(world.alpha, "Alpha late", by=world.alice, cron="*/5 * * * *")
    make_schedule(world.alpha, "Alpha on time", by=world.alice, cron="*/5 * * * *")
    late.next_run_at = now - timedelta(hours=1)  # no tick dispatched it: overdue
    make_run(report, "failed", 60)
    make_run(report, "failed", 120)
    make_run(report, "failed", 60 * 48)  # two days ago: not in the last 24 hours
    make_run(report, "succeeded", 30)
    make_run(report, "queued", 60, trigger="manual")  # could have started an hour ago
    make_run(report, "queued", 1, trigger="manual")  # within the grace
    db.session.commit()
    page = Panel(app, olga).get("/operator").get_data(as_text=True)
    assert tenant_counts(page, world.alpha.id) == {
        "schedules": 3,
        "failed": 2,
        "overdue-schedules": 2,  # late, and report with its run waiting an hour
        "overdue-runs": 1,
    }
    assert tenant_counts(page, world.beta.id) == {
        "schedules": 0,
        "failed": 0,
        "overdue-schedules": 0,
        "overdue-runs": 0,
    }


# --- viewing a tenant read-only -----------------------------------------------------------------


def test_an_operator_views_another_tenant_read_only_and_it_is_audited(
    app: Flask, world: World, olga: User
) -> None:
    schedule = make_schedule(world.alpha, "Alpha nightly report", by=world.alice, cron="0 2 * * *")
    run = make_run(schedule, "succeeded", 30, output="alpha-output-line")
    db.session.commit()
    memberships = db.session.scalar(select(func.count()).select_from(Membership))
    panel = Panel(app, olga)
    response = panel.post(f"/operator/tenants/{world.alpha.id}/view", htmx=False)
    assert (response.status_code, response.headers["Location"]) == (303, "/")
    page = panel.get("/").get_data(as_text=True)
    assert "Operator view of <strong>Alpha Corp</strong> (read-only)" in page
    assert "Alpha nightly report" in page
    assert "alpha-output-line" in panel.get(f"/runs/{run.id}").get_data(as_text=True)
    assert panel.get("/audit").status_code == 200
    # Every write answers 403, as for a viewer.
    assert panel.post(f"/schedules/{schedule.id}/pause").status_code == 403
    assert panel.post(f"/schedules/{schedule.id}/run").status_code == 403
    assert panel.post(f"/schedules/{schedule.id}/delete").status_code == 403
    assert panel.get("/tokens").status_code == 403
    db.session.refresh(schedule)
    assert schedule.active
    assert db.session.scalar(select(func.count()).select_from(Run)) == 1
    # The view made no membership; the tenant's audit log says who looked.
    assert db.session.scalar(select(func.count()).select_from(Membership)) == memberships
    (row,) = audit_rows("operator.viewed_tenant")
    assert (row.tenant_id, row.actor_id, row.actor_label) == (world.alpha.id, olga.id, OPERATOR)
    # Ending the view leaves no tenant: back to the operator area.
    panel.post("/operator/view/end", htmx=False)
    assert panel.get("/").headers["Location"] == "/operator"


def test_a_cookie_copied_during_a_view_shows_nothing_once_the_view_ends(
    app: Flask, world: World, olga: User
) -> None:
    """The view ends on the server: replaying the cookie it had gives the login page, not the
    tenant's pages without an audit row."""
    make_schedule(world.alpha, "Alpha nightly report", by=world.alice, cron="0 2 * * *")
    db.session.commit()
    panel = Panel(app, olga)
    panel.post(f"/operator/tenants/{world.alpha.id}/view", htmx=False)
    cookie = panel.client.get_cookie("session")
    assert cookie is not None
    assert "Alpha nightly report" in panel.get("/").get_data(as_text=True)
    assert panel.post("/operator/view/end", htmx=False).status_code == 303
    assert panel.get("/operator").status_code == 200  # the operator stays logged in
    replay = app.test_client()
    replay.set_cookie("session", cookie.value)
    response = replay.get("/")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login")
    assert len(audit_rows("operator.viewed_tenant")) == 1


def test_an_operator_view_of_an_unknown_tenant_is_404(app: Flask, world: World, olga: User) -> None:
    panel = Panel(app, olga)
    assert panel.post("/operator/tenants/999999/view").status_code == 404
    assert audit_rows("operator.viewed_tenant") == []


def test_an_operator_who_is_a_member_keeps_their_role_in_their_own_tenant(
    app: Flask, world: World
) -> None:
    world.alice.is_operator = True
    db.session.commit()
    panel = Panel(app, world.alice)
    panel.post(f"/operator/tenants/{world.beta.id}/view", htmx=False)
    page = panel.get("/").get_data(as_text=True)
    assert "Operator view of <strong>Beta Ltd</strong>" in page
    assert 'id="tenant-switch"' not in page
    in_view = panel.client.get_cookie("session")
    assert in_view is not None
    panel.post(f"/operator/tenants/{world.alpha.id}/view", htmx=False)
    page = panel.get("/").get_data(as_text=True)
    assert "Operator view" not in page and "New schedule" in page  # alice is alpha's admin
    # Switching to her own tenant ended the view on the server too.
    replay = app.test_client()
    replay.set_cookie("session", in_view.value)
    assert replay.get("/").status_code == 302
    assert len(audit_rows("operator.viewed_tenant")) == 1  # only the view of beta


# --- the workers page ---------------------------------------------------------------------------


@dataclass
class Fleet:
    live: Worker
    stale: Worker
    stopped: Worker
    live_run: Run  # held by the live worker, lease live
    stale_run: Run  # held by the stale worker, lease expired
    stale_live_lease: Run  # held by the stale worker, lease not yet expired


def fleet(world: World) -> Fleet:
    now = datetime.now(UTC)
    live = Worker(hostname="host-a", pid=101, concurrency=4, version="1.2.3", abandoned_jobs=2)
    stale = Worker(hostname="host-b", pid=202, last_heartbeat_at=now - timedelta(minutes=10))
    stopped = Worker(hostname="host-c", pid=303, stopped_at=now - timedelta(hours=2))
    db.session.add_all([live, stale, stopped])
    db.session.flush()
    schedule = make_schedule(world.alpha, "Alpha echo", by=world.alice, cron="*/5 * * * *")
    live_run = make_run(
        schedule, "running", 1, worker_id=live.id, locked_until=now + timedelta(seconds=50)
    )
    stale_run = make_run(
        schedule, "running", 12, worker_id=stale.id, locked_until=now - timedelta(minutes=9)
    )
    stale_live_lease = make_run(
        schedule, "running", 3, worker_id=stale.id, locked_until=now + timedelta(minutes=5)
    )
    make_run(schedule, "succeeded", 20, worker_id=live.id)
    make_run(schedule, "failed", 25, worker_id=live.id)
    make_run(schedule, "succeeded", 180, worker_id=live.id)  # three hours ago: not counted
    db.session.commit()
    return Fleet(live, stale, stopped, live_run, stale_run, stale_live_lease)


def section(page: str, element_id: str) -> str:
    found = re.search(rf'<section [^>]*id="{element_id}".*?</section>', page, re.S)
    assert found, f"no section {element_id}"
    return found.group(0)


def test_the_workers_page_shows_states_held_runs_and_expired_leases(
    app: Flask, world: World, olga: User
) -> None:
    workers = fleet(world)
    page = Panel(app, olga).get("/operator/workers").get_data(as_text=True)
    live = section(page, f"worker-{workers.live.id}")
    assert "host-a" in live and "pid 101" in live and "1.2.3" in live
    assert ">running</span>" in live
    counts = dict(re.findall(r'data-count="([a-z-]+)">(\d+)<', live))
    assert counts == {"in-flight": "1", "done": "1", "failed": "1", "abandoned": "2"}
    assert f'id="lease-{workers.live_run.id}"' in live
    stale = section(page, f"worker-{workers.stale.id}")
    assert ">stale</span>" in stale
    assert f'id="lease-{workers.stale_run.id}"' in stale
    assert f'id="lease-{workers.stale_live_lease.id}"' in stale
    stopped = section(page, f"worker-{workers.stopped.id}")
    assert ">stopped</span>" in stopped and "Holds no run." in stopped
    expired = section(page, "expired-leases")
    assert f'id="lease-{workers.stale_run.id}-expired"' in expired
    assert f"lease-{workers.live_run.id}" not in expired
    assert f"lease-{workers.stale_live_lease.id}" not in expired


def test_a_release_is_refused_while_the_worker_heartbeats(
    app: Flask, world: World, olga: User
) -> None:
    workers = fleet(world)
    before = get_run(workers.live_run.id)
    state = (before.status, before.worker_id, before.locked_until, before.attempt)
    url = f"/operator/workers/{workers.live.id}/runs/{workers.live_run.id}/release"
    for htmx in (True, False):
        response = Panel(app, olga).post(url, htmx=htmx)
        assert response.status_code == 409
        text = response.get_data(as_text=True)
        assert re.search(
            rf"worker {workers.live.id} on host-a is still heartbeating \(last \d+ s ago\): "
            "its lease is live",
            text,
        ), text
    after = get_run(workers.live_run.id)
    assert (after.status, after.worker_id, after.locked_until, after.attempt) == state
    assert audit_rows("operator.released_lease") == []


def test_a_stale_workers_run_is_released_to_the_queue_without_spending_an_attempt(
    app: Flask, world: World, olga: User
) -> None:
    workers = fleet(world)
    panel = Panel(app, olga)
    for run in (workers.stale_live_lease, workers.stale_run):  # live lease or not: stale owner
        available = get_run(run.id).available_at
        url = f"/operator/workers/{workers.stale.id}/runs/{run.id}/release"
        response = panel.post(url)
        assert response.status_code == 200, response.get_data(as_text=True)
        text = response.get_data(as_text=True)
        assert f"Run {run.id} released from worker {workers.stale.id} on host-b" in text
        assert f'id="lease-{run.id}"' not in text  # the refreshed list no longer shows it
        released = get_run(run.id)
        assert (released.status, released.worker_id, released.locked_until) == (
            "queued",
            None,
            None,
        )
        assert released.attempt == 0  # the lost attempt does not count
        assert released.available_at == available  # nor does it lose its place in the queue
    rows = audit_rows("operator.released_lease")
    assert [(r.tenant_id, r.actor_id, r.actor_label, r.object_id) for r in rows] == [
        (world.alpha.id, olga.id, OPERATOR, workers.stale_live_lease.id),
        (world.alpha.id, olga.id, OPERATOR, workers.stale_run.id),
    ]
    assert rows[0].before is not None and rows[0].before["worker_id"] == workers.stale.id
    assert rows[0].after is not None and rows[0].after["status"] == "queued"
    # Released once: a second release finds nothing held.
    url = f"/operator/workers/{workers.stale.id}/runs/{workers.stale_run.id}/release"
    response = panel.post(url)
    assert response.status_code == 409
    assert "is not held by worker" in response.get_data(as_text=True)


def test_an_expired_lease_of_a_heartbeating_worker_may_be_released(
    app: Flask, world: World, olga: User
) -> None:
    workers = fleet(world)
    run = get_run(workers.live_run.id)
    run.locked_until = datetime.now(UTC) - timedelta(minutes=1)
    db.session.commit()
    url = f"/operator/workers/{workers.live.id}/runs/{run.id}/release"
    assert Panel(app, olga).post(url).status_code == 200
    assert get_run(run.id).status == "queued"


def test_a_release_of_an_unknown_worker_or_run_is_404(app: Flask, world: World, olga: User) -> None:
    workers = fleet(world)
    panel = Panel(app, olga)
    for url in (
        f"/operator/workers/999999/runs/{workers.stale_run.id}/release",
        f"/operator/workers/{workers.stale.id}/runs/999999/release",
    ):
        assert panel.post(url).status_code == 404, url
    # A run held by another worker is not this worker's to release.
    url = f"/operator/workers/{workers.stale.id}/runs/{workers.live_run.id}/release"
    assert panel.post(url).status_code == 409
    assert get_run(workers.stale_run.id).status == "running"
    assert get_run(workers.live_run.id).status == "running"
    assert audit_rows("operator.released_lease") == []


def test_a_release_needs_the_csrf_token(app: Flask, world: World, olga: User) -> None:
    workers = fleet(world)
    url = f"/operator/workers/{workers.stale.id}/runs/{workers.stale_run.id}/release"
    assert Panel(app, olga).post(url, csrf=False).status_code == 400
    assert get_run(workers.stale_run.id).status == "running"


# --- what the worker reports --------------------------------------------------------------------


def test_a_worker_records_its_version_and_reports_abandoned_jobs(app: Flask, world: World) -> None:
    worker = WorkerProcess(app, concurrency=1)
    worker_id = worker.register()
    pool = ThreadJobPool(app, current_catalog(), {}, 1, Event())
    pool.abandoned_threads = 3
    worker.pool = pool
    worker.heartbeat(datetime.now(UTC))
    db.session.expire_all()
    row = db.session.get(Worker, worker_id)
    assert row is not None
    assert row.version == release.version()
    assert row.abandoned_jobs == 3
