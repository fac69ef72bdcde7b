"""Schedule actions answer for the place their form is on: a row of the list (the row or badge,
swapped), the schedule's page (the page's content, its history headed by a new run) or the
resume page (back to the page that linked to it); plain posts redirect there. Bob gets 403,
charlie 404, everywhere."""

from __future__ import annotations

import pytest
from flask import Flask
from sqlalchemy import func, select

from tests.conftest import PASSWORD, World
from tests.panel_helpers import Panel, Seeded, counted_statements, log_in, seed
from webapp.extensions import db
from webapp.models import Run, Schedule
from webapp.web.formatting import dom_id


@pytest.fixture
def data(world: World) -> Seeded:
    return seed(world)


DETAIL = {"place": "detail"}


def test_run_now_on_the_schedule_page_puts_the_new_run_at_the_top_of_its_history(
    app: Flask, world: World, data: Seeded
) -> None:
    response = Panel(app, world.alice).post(f"/schedules/{data.report.id}/run", DETAIL)
    assert response.status_code == 200
    run = db.session.scalar(select(Run).order_by(Run.id.desc()))
    assert run is not None and run.trigger == "manual"
    page = response.get_data(as_text=True)
    assert page.lstrip().startswith(f'<div id="{dom_id(data.report, "detail")}"')
    history = page[page.index('id="run-rows"') :]
    assert history.index(f'<tr id="{dom_id(run)}"') < history.index(f'id="{dom_id(data.queued)}"')
    # The new run's last-run badge and its history row (whole) poll, fast in its first seconds.
    for live in (f'id="{dom_id(run, "status")}"', f'<tr id="{dom_id(run)}"'):
        tag = page[page.index(live) :]
        assert 'hx-trigger="every 250ms"' in tag[: tag.index(">")], live
    assert f"Run #{run.id} of “Alpha nightly report” queued." in page  # the message, out of band


def test_run_now_in_a_row_answers_with_the_badge_and_without_javascript_returns_to_the_list(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    url = f"/schedules/{data.report.id}/run"
    with counted_statements() as statements:
        badge = alice.post(url).get_data(as_text=True)
    assert badge.lstrip().startswith('<span class="run-status"')
    # The answer needs nothing of the schedule that the commit expired: no read after the run.
    inserted = next(i for i, sql in enumerate(statements) if "INSERT INTO runs" in sql)
    assert not [sql for sql in statements[inserted:] if "FROM schedules" in sql], statements
    plain = alice.post(url, {"next": "/?q=alpha"}, htmx=False)
    assert plain.status_code == 303 and plain.headers["Location"] == "/?q=alpha"
    from_page = alice.post(f"/schedules/{data.report.id}/run", DETAIL, htmx=False)
    assert from_page.headers["Location"] == f"/schedules/{data.report.id}"


def test_pause_on_the_schedule_page_answers_with_the_page_and_in_a_row_with_the_row(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    page = alice.post(f"/schedules/{data.report.id}/pause", DETAIL).get_data(as_text=True)
    assert page.lstrip().startswith(f'<div id="{dom_id(data.report, "detail")}"')
    assert "badge-paused" in page and ">Resume</a>" in page
    resume_link = f'href="/schedules/{data.report.id}/resume?next=/schedules/{data.report.id}"'
    assert resume_link in page
    resumed = alice.post(f"/schedules/{data.report.id}/resume", {"missed": "skip"})
    assert resumed.get_data(as_text=True).lstrip().startswith(f'<tr id="{dom_id(data.report)}"')


def test_the_resume_question_in_a_row_replaces_the_row_and_on_its_page_posts_back(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    url = f"/schedules/{data.paused.id}/resume"
    in_row = alice.get(f"{url}?next=/", htmx=True).get_data(as_text=True)
    assert f'hx-target="#{dom_id(data.paused)}"' in in_row
    assert 'name="next" value="/"' in in_row
    on_page = alice.get(f"{url}?next=/").get_data(as_text=True)
    assert "hx-post" not in on_page  # nothing on that page to swap: a plain post
    assert 'name="next" value="/"' in on_page
    for opened in (url, f"{url}?next=//evil.example/", f"{url}?next=https://evil.example/"):
        page = alice.get(opened).get_data(as_text=True)
        assert f'name="next" value="/schedules/{data.paused.id}"' in page, opened
    back = alice.post(url, {"missed": "skip", "next": f"/schedules/{data.paused.id}"}, htmx=False)
    assert back.status_code == 303 and back.headers["Location"] == f"/schedules/{data.paused.id}"
    assert db.session.get_one(Schedule, data.paused.id).active


def test_a_plain_post_never_returns_to_another_host(app: Flask, world: World, data: Seeded) -> None:
    response = Panel(app, world.alice).post(
        f"/schedules/{data.report.id}/pause", {"next": "//evil.example/"}, htmx=False
    )
    assert response.headers["Location"] == f"/schedules/{data.report.id}"


def test_delete_from_the_schedule_page_sends_htmx_to_the_list(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    response = alice.post(f"/schedules/{data.report.id}/delete", {"leave": "1"})
    assert response.status_code == 200 and response.headers["HX-Redirect"] == "/"
    assert "Schedule “Alpha nightly report” deleted." in alice.get("/").get_data(as_text=True)


def test_a_failed_htmx_write_says_why_and_swaps_nothing(
    app: Flask, world: World, data: Seeded
) -> None:
    """htmx 4 swaps 4xx answers: a whole error page must not land in a row or a badge."""
    alice = Panel(app, world.alice)
    report_id = data.report.id
    alice.post(f"/schedules/{report_id}/delete")
    for url in (f"/schedules/{report_id}/pause", f"/schedules/{report_id}/run"):
        response = alice.post(url, DETAIL)
        assert response.status_code == 404
        assert response.headers["HX-Reswap"] == "none"
        text = response.get_data(as_text=True)
        assert 'hx-swap-oob="true"' in text and "There is nothing here" in text
        assert "<html" not in text
        plain = alice.post(url, DETAIL, htmx=False)
        assert plain.status_code == 404 and "<html" in plain.get_data(as_text=True)


def test_bob_gets_403_and_charlie_404_from_every_place(
    app: Flask, world: World, data: Seeded
) -> None:
    r, p = data.report.id, data.paused.id
    posts = [
        (f"/schedules/{r}/run", DETAIL),
        (f"/schedules/{r}/pause", DETAIL),
        (f"/schedules/{p}/resume", {"missed": "catch_up", "next": "/"}),
        (f"/schedules/{r}/delete", {"leave": "1"}),
    ]
    bob, charlie = Panel(app, world.bob), Panel(app, world.charlie)
    for url, form in posts:
        for htmx in (True, False):
            assert bob.post(url, form, htmx=htmx).status_code == 403, url
            assert charlie.post(url, form, htmx=htmx).status_code == 404, url
    for htmx in (True, False):
        assert bob.get(f"/schedules/{p}/resume?next=/", htmx=htmx).status_code == 403
        assert charlie.get(f"/schedules/{p}/resume?next=/", htmx=htmx).status_code == 404
    assert (
        db.session.scalar(select(Run).where(Run.trigger == "manual", Run.id > data.queued.id))
        is None
    )
    assert not db.session.get_one(Schedule, p).active
    assert db.session.get(Schedule, r) is not None


def test_run_now_of_a_job_gone_from_the_catalog_is_409_with_the_reason(
    app: Flask, world: World, data: Seeded
) -> None:
    data.report.job = "reports.retired"
    db.session.commit()
    alice = Panel(app, world.alice)
    for form in ({}, DETAIL):
        response = alice.post(f"/schedules/{data.report.id}/run", form)
        assert response.status_code == 409 and response.headers["HX-Reswap"] == "none"
        assert "reports.retired" in response.get_data(as_text=True)
    page = alice.post(f"/schedules/{data.report.id}/run", htmx=False)
    assert page.status_code == 409
    assert "Not possible" in page.get_data(as_text=True) and "reports.retired" in page.text
    assert db.session.scalar(select(Run).where(Run.id > data.beta_run.id)) is None


@pytest.mark.parametrize("action", ["pause", "run", "resume"])
def test_cr_lf_in_next_returns_to_a_safe_page_after_the_write(
    app: Flask, world: World, data: Seeded, action: str
) -> None:
    schedule = data.paused if action == "resume" else data.report
    runs_before = db.session.execute(select(func.count()).select_from(Run)).scalar_one()
    response = Panel(app, world.alice).post(
        f"/schedules/{schedule.id}/{action}",
        {"next": "/\r\nSet-Cookie: stolen=1", "missed": "skip"},
        htmx=False,
    )
    assert response.status_code == 303
    assert response.headers["Location"] in (f"/schedules/{schedule.id}", "/")
    assert "stolen" not in str(response.headers)
    db.session.expire_all()
    changed = db.session.get(Schedule, schedule.id)
    assert changed is not None
    if action == "run":
        assert db.session.scalar(select(func.count()).select_from(Run)) == runs_before + 1
    else:
        assert changed.active is (action == "resume")


def test_cr_lf_in_next_after_login_lands_on_the_schedules(app: Flask, world: World) -> None:
    client = app.test_client()
    response = log_in(client, "alice@example.com", PASSWORD, "/%0d%0aSet-Cookie:%20stolen=1")
    assert response.status_code == 303
    assert response.headers["Location"] == "/"
