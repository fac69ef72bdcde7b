"""The tenant admin panel's views: alice (admin) can, bob (viewer) reads only, charlie (another
tenant) gets 404 and never alpha's data; every write needs the CSRF token."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from flask import Flask
from sqlalchemy import func, insert, select, update

from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import ALPHA_SECRETS, Panel, Seeded, schedule_form, seed
from webapp.extensions import db
from webapp.models import AuditEvent, Run, Schedule
from webapp.services.upcoming import Fire, Folded, by_day, folded
from webapp.web.formatting import dom_id


@pytest.fixture
def data(world: World) -> Seeded:
    return seed(world)


def pages(d: Seeded) -> list[str]:
    """Every GET route of the panel, with alpha's ids."""
    r, p = d.report.id, d.paused.id
    return [
        "/",
        "/?q=nightly&job=demo.echo&status=active",
        f"/schedules/{r}",
        "/schedules/form/params?job=demo.sleep",
        "/schedules/form/preview?cron=*/7+*+*+*+*&time_zone=Europe/Berlin",
        "/upcoming",
        "/runs",
        f"/runs?schedule={r}&status=succeeded&trigger=schedule",
        f"/runs/{d.succeeded.id}",
        f"/runs/{d.queued.id}/status",
        "/audit",
        f"/schedules/{p}/resume",  # admin only
        "/schedules/new",  # admin only
        f"/schedules/{r}/edit",  # admin only
    ]


ADMIN_ONLY_PAGES = 3


def writes(d: Seeded) -> list[tuple[str, dict[str, str]]]:
    r, p = d.report.id, d.paused.id
    form = {
        "name": "Changed",
        "job": "demo.echo",
        "args.message": "hello",
        "cron": "*/7 * * * *",
        "time_zone": "UTC",
        "misfire_policy": "fire_once",
        "overlap_policy": "allow",
        "active": "on",
    }
    return [
        ("/schedules/new", form),
        (f"/schedules/{r}/edit", form),
        (f"/schedules/{r}/run", {}),
        (f"/schedules/{r}/pause", {}),
        (f"/schedules/{p}/resume", {"missed": "skip"}),
        (f"/schedules/{r}/delete", {}),
    ]


def test_alice_sees_every_page_and_every_fragment(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    for url in pages(data):
        for htmx in (False, True):
            response = alice.get(url, htmx=htmx)
            assert response.status_code == 200, (url, htmx)
            assert "HX-Request" in response.headers["Vary"], url
            page = response.get_data(as_text=True)
            assert ("<html" in page) is not htmx, (url, htmx)


def test_the_schedule_list_shows_what_an_admin_needs(
    app: Flask, world: World, data: Seeded
) -> None:
    page = Panel(app, world.alice).get("/").get_data(as_text=True)
    row = page[page.index(f'id="{dom_id(data.report)}"') :]
    row = row[: row.index("</tr>")]
    assert "Alpha nightly report" in row and "Echo a message" in row
    assert "0 2 * * *" in row and "At 02:00" in row and "Europe/Berlin" in row
    assert "queued" in row  # the last run, polling itself
    assert 'hx-trigger="every 1s"' in row
    for button in ("Run now", "Pause", "Edit", "Delete"):
        assert f">{button}<" in row
    assert "hx-confirm=" in row
    assert ">Resume<" in page and "New schedule" in page
    assert "Alpha Corp" in page  # the current tenant, always visible


def test_search_and_filters_narrow_the_list(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    found = alice.get("/?q=NIGHTLY", htmx=True).get_data(as_text=True)
    assert "Alpha nightly report" in found and "Alpha paused cleanup" not in found
    paused = alice.get("/?status=paused").get_data(as_text=True)
    assert "Alpha paused cleanup" in paused and "Alpha nightly report" not in paused
    by_job = alice.get("/?job=demo.sleep").get_data(as_text=True)
    assert "Alpha paused cleanup" in by_job and "Alpha nightly report" not in by_job
    none = alice.get("/?q=zzz").get_data(as_text=True)
    assert "No schedule matches" in none


def test_an_empty_tenant_explains_what_to_do(app: Flask, world: World) -> None:
    assert "Create the first schedule" in Panel(app, world.alice).get("/").get_data(as_text=True)
    viewer_page = Panel(app, world.bob).get("/").get_data(as_text=True)
    assert "ask an admin" in viewer_page and "Create the first schedule" not in viewer_page


def test_bob_the_viewer_reads_everything_and_sees_no_action_controls(
    app: Flask, world: World, data: Seeded
) -> None:
    bob = Panel(app, world.bob)
    for url in pages(data)[:-ADMIN_ONLY_PAGES]:
        response = bob.get(url)
        assert response.status_code == 200, url
        page = response.get_data(as_text=True)
        for control in ("Run now", ">Pause<", ">Edit<", ">Delete<", "New schedule", ">Resume<"):
            assert control not in page, (url, control)
    for url in pages(data)[-ADMIN_ONLY_PAGES:]:
        assert bob.get(url).status_code == 403, url


def test_bob_the_viewer_gets_403_on_every_write(app: Flask, world: World, data: Seeded) -> None:
    bob = Panel(app, world.bob)
    before = db.session.scalar(select(func.count()).select_from(AuditEvent))
    for url, form in writes(data):
        for htmx in (True, False):
            assert bob.post(url, form, htmx=htmx).status_code == 403, url
    assert db.session.scalar(select(func.count()).select_from(AuditEvent)) == before


def test_charlie_gets_404_for_alpha_ids_and_never_sees_alpha_data(
    app: Flask, world: World, data: Seeded
) -> None:
    charlie = Panel(app, world.charlie)
    ids = (data.report.id, data.paused.id, data.succeeded.id, data.queued.id)
    for url in pages(data):
        response = charlie.get(url)
        page = response.get_data(as_text=True)
        if any(str(i) in url for i in ids) and "/schedules/new" not in url:
            assert response.status_code == 404, url
        else:
            assert response.status_code == 200, url
        for secret in ALPHA_SECRETS:
            assert secret not in page, (url, secret)
    for url, form in writes(data)[1:]:
        response = charlie.post(url, form)
        assert response.status_code == 404, url
        assert "Alpha" not in response.get_data(as_text=True)
    assert db.session.get(Schedule, data.report.id) is not None
    # charlie's own data is there
    assert "Beta hourly ping" in charlie.get("/").get_data(as_text=True)


@pytest.mark.parametrize("htmx", [True, False])
def test_a_write_without_the_csrf_token_is_refused(
    app: Flask, world: World, data: Seeded, htmx: bool
) -> None:
    alice = Panel(app, world.alice)
    for url, form in writes(data):
        assert alice.post(url, form, htmx=htmx, csrf=False).status_code == 400, url
    assert db.session.get(Schedule, data.report.id) is not None


def test_the_new_schedule_form_is_generated_from_the_catalog(app: Flask, world: World) -> None:
    page = Panel(app, world.alice).get("/schedules/new").get_data(as_text=True)
    for label in ("Name", "Job", "Message", "Cron expression", "Time zone"):
        assert f">{label}" in page, label
    assert "Echo a message (demo.echo)" in page
    assert 'value="Europe/Berlin"' in page  # the tenant's zone by default
    assert 'name="args.message"' in page
    assert 'hx-get="/schedules/form/params"' in page
    assert 'hx-get="/schedules/form/preview"' in page


def test_changing_the_job_swaps_in_its_typed_fields(app: Flask, world: World) -> None:
    alice = Panel(app, world.alice)
    sleep = alice.get("/schedules/form/params?job=demo.sleep", htmx=True).get_data(as_text=True)
    assert ">Seconds" in sleep and 'type="number"' in sleep and 'min="0' in sleep
    assert "How long the run lasts." in sleep
    fail = alice.get("/schedules/form/params?job=demo.fail", htmx=True).get_data(as_text=True)
    assert 'value="Failed on purpose"' in fail  # the default
    unknown = alice.get("/schedules/form/params?job=os.system", htmx=True).get_data(as_text=True)
    assert "takes no parameters" in unknown


def test_the_cron_preview_describes_and_lists_fire_times(app: Flask, world: World) -> None:
    alice = Panel(app, world.alice)
    ok = alice.get(
        "/schedules/form/preview?cron=*/7 * * * *&time_zone=Europe/Berlin", htmx=True
    ).get_data(as_text=True)
    assert "Every 7 minutes" in ok
    assert len(re.findall(r"<li>", ok)) == 5
    never = alice.get("/schedules/form/preview?cron=0 0 30 2 *&time_zone=UTC", htmx=True).get_data(
        as_text=True
    )
    assert "would never fire" in never
    bad_zone = alice.get(
        "/schedules/form/preview?cron=0 0 * * *&time_zone=Mars/Base", htmx=True
    ).get_data(as_text=True)
    assert "unknown time zone" in bad_zone


def test_the_preview_notes_daylight_saving_changes(app: Flask, world: World) -> None:
    page = Panel(app, world.alice).get(
        "/schedules/form/preview?cron=30 2 25-31 3 *&time_zone=Europe/Berlin", htmx=True
    )
    # 02:30 does not exist in Berlin on the last Sunday of March, one of the five days listed:
    # the preview says what happens instead.
    assert 'class="dst-note"' in page.get_data(as_text=True)


def test_the_preview_says_what_happens_at_the_next_clock_changes_from_a_chosen_day(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    page = alice.get(
        "/schedules/form/preview?cron=30 2 * * *&time_zone=America/New_York"
        "&preview_from=2027-03-14",
        htmx=True,
    ).get_data(as_text=True)
    # Fires from the start of that local day: the first is the one the gap moves to 03:00.
    assert "2027-03-14 03:00 EDT (-04:00)" in page and "2027-03-15 02:30 EDT" in page
    assert "2027-03-14</span> clocks go forward 1 hour at 02:00 (EST to EDT)" in page
    assert "02:30 does not exist; runs at 03:00 EDT" in page
    assert "2027-11-07</span> clocks go back 1 hour at 02:00 (EDT to EST):" in page
    kolkata = alice.get(
        "/schedules/form/preview?cron=30 2 * * *&time_zone=Asia/Kolkata", htmx=True
    ).get_data(as_text=True)
    assert "Asia/Kolkata does not change its clocks" in kolkata


@pytest.mark.parametrize("day", ["2027-02-30", "tomorrow", "0999-01-01", "2027-3-1"])
def test_a_bad_preview_date_is_a_400_shown_in_the_preview(
    app: Flask, world: World, day: str
) -> None:
    response = Panel(app, world.alice).get(
        f"/schedules/form/preview?cron=30 2 * * *&time_zone=UTC&preview_from={day}", htmx=True
    )
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert 'id="cron-preview"' in page and 'data-field="preview_from"' in page
    assert "is not a date between 1970-01-01 and 2999-12-31" in page


def test_the_form_sends_its_preview_date_with_every_preview_request(
    app: Flask, world: World
) -> None:
    page = Panel(app, world.alice).get("/schedules/new").get_data(as_text=True)
    assert '<label for="preview_from">Preview from</label>' in page
    previewing = re.findall(r'<(?:input|select)[^>]*hx-get="/schedules/form/preview"[^>]*>', page)
    fields = {re.search(r'id="([a-z_-]+)"', tag).group(1) for tag in previewing}  # type: ignore[union-attr]
    assert {"cron", "phrase", "time_zone", "jitter_seconds", "preview_from"} <= fields
    assert {"calendar", "calendar_policy", "repeat"} <= fields  # and the builder's fields
    for tag in previewing:
        assert "#cron, #time_zone, #preview_from, #jitter_seconds, #calendar" in tag
        # a later field's request replaces an earlier one's in flight (never the form's save)
        assert 'hx-sync="#schedule-timing:replace"' in tag


def test_saving_creates_through_the_service_with_an_audit_event(app: Flask, world: World) -> None:
    response = Panel(app, world.alice).post("/schedules/new", schedule_form())
    assert response.status_code == 200
    schedule = db.session.scalar(select(Schedule).where(Schedule.name == "Every seven"))
    assert schedule is not None and schedule.tenant_id == world.alpha.id
    assert schedule.args == {"message": "hello <world>"}
    assert response.headers["HX-Redirect"] == f"/schedules/{schedule.id}"
    event = db.session.scalar(select(AuditEvent).where(AuditEvent.object_id == schedule.id))
    assert event is not None and event.actor_label == "alice@example.com"


def test_a_plain_form_post_redirects_with_303(app: Flask, world: World) -> None:
    response = Panel(app, world.alice).post("/schedules/new", schedule_form(), htmx=False)
    assert response.status_code == 303
    assert response.headers["Location"].startswith("/schedules/")


def test_errors_are_shown_next_to_their_fields_with_422_and_values_kept(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    for htmx in (True, False):
        response = alice.post(
            "/schedules/new",
            schedule_form(name="Kept <name>", cron="0 0 30 2 *", **{"args.message": ""}),
            htmx=htmx,
        )
        assert response.status_code == 422
        page = response.get_data(as_text=True)
        assert 'id="cron-error"' in page and "would never fire" in page
        assert 'id="args-message-error"' in page and "Field required" in page
        assert 'value="Kept &lt;name&gt;"' in page
        assert 'value="0 0 30 2 *"' in page
    assert db.session.scalar(select(func.count()).select_from(Schedule)) == 0


def test_an_argument_over_its_size_limit_is_refused_next_to_its_field_and_kept(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    form = alice.get("/schedules/new").get_data(as_text=True)
    assert 'maxlength="4096"' in form and "At most 4096 bytes (UTF-8)." in form
    too_long = "é" * 2049  # fits the input's maxlength (characters), not the limit (bytes)
    for htmx in (True, False):
        response = alice.post(
            "/schedules/new", schedule_form(**{"args.message": too_long}), htmx=htmx
        )
        assert response.status_code == 422
        page = response.get_data(as_text=True)
        assert 'id="args-message-error"' in page
        assert "should be at most 4096 bytes, not 4098" in page
        assert f'value="{too_long}"' in page
    assert db.session.scalar(select(func.count()).select_from(Schedule)) == 0


def test_run_now_refuses_stored_arguments_over_the_limit(
    app: Flask, world: World, data: Seeded
) -> None:
    db.session.execute(
        update(Schedule).where(Schedule.id == data.report.id).values(args={"message": "x" * 5000})
    )
    db.session.commit()
    runs = db.session.scalar(select(func.count()).select_from(Run))
    response = Panel(app, world.alice).post(f"/schedules/{data.report.id}/run")
    assert response.status_code == 409
    assert "should be at most 4096 bytes, not 5000" in response.get_data(as_text=True)
    assert db.session.scalar(select(func.count()).select_from(Run)) == runs


def test_a_typed_parameter_refuses_text(app: Flask, world: World) -> None:
    response = Panel(app, world.alice).post(
        "/schedules/new", schedule_form(job="demo.sleep", **{"args.seconds": "soon"})
    )
    assert response.status_code == 422
    assert 'id="args-seconds-error"' in response.get_data(as_text=True)


def test_editing_keeps_the_schedule_and_audits_the_change(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    page = alice.get(f"/schedules/{data.report.id}/edit").get_data(as_text=True)
    assert 'value="alpha-secret-message"' in page and 'value="0 2 * * *"' in page
    response = alice.post(
        f"/schedules/{data.report.id}/edit",
        schedule_form(name="Alpha nightly report", cron="0 3 * * *"),
    )
    assert response.status_code == 200
    assert db.session.get_one(Schedule, data.report.id).cron == "0 3 * * *"
    audit = alice.get("/audit").get_data(as_text=True)
    assert '<del><code class="nowrap">0 2 * * *</code>' in audit
    assert '<ins><code class="nowrap">0 3 * * *</code>' in audit


NOTHING = "\N{EN DASH}"  # an empty side of a change


def change_rows(page: str) -> list[tuple[str, str, str]]:
    """(field, before, after) of each line of the first event's changes, as text."""
    table = re.search(r'<table class="changes">(.*?)</table>', page, re.S)
    assert table is not None
    rows = re.findall(
        r"<tr><th scope=\"row\">(.*?)</th>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", table.group(1), re.S
    )

    def text(cell: str) -> str:
        return " ".join(re.sub(r"<[^>]+>", " ", cell).split())

    return [(text(field), text(before), text(after)) for field, before, after in rows]


def test_the_audit_log_uses_the_form_labels_and_values(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    response = alice.post(
        f"/schedules/{data.report.id}/edit",
        schedule_form(
            name="Alpha nightly report",
            cron="*/7 * * * *",
            misfire_policy="skip",
            **{"args.message": "changed <b>"},
        ),
    )
    assert response.status_code == 200
    page = alice.get("/audit").get_data(as_text=True)
    assert change_rows(page) == [
        ("Message parameter", "alpha-secret-message", "changed &lt;b&gt;"),
        (
            "Cron expression",
            "0 2 * * * At 02:00",
            "*/7 * * * * Every 7 minutes "
            "(from :00 each hour; the gap across the hour is 4 minutes)",
        ),
        (
            "After downtime (missed fire times)",
            "Run once for all missed times (default)",
            "Skip missed times",
        ),
    ]
    alice.post(f"/schedules/{data.report.id}/pause")
    assert change_rows(alice.get("/audit").get_data(as_text=True)) == [
        ("Active", "Active", "Paused")
    ]
    # The schedule's own page shows its trail the same way.
    detail = alice.get(f"/schedules/{data.report.id}").get_data(as_text=True)
    assert change_rows(detail) == [("Active", "Active", "Paused")]
    alice.post(f"/schedules/{data.report.id}/run")
    run_id = db.session.scalar(select(func.max(Run.id)))
    run, at = change_rows(alice.get("/audit").get_data(as_text=True))
    assert run == ("Run", NOTHING, f"#{run_id}") and at[:2] == ("Run at", NOTHING)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d CES?T just now", at[2])
    # A creation has nothing before; every field of the form, parameters by their titles.
    alice.post("/schedules/new", schedule_form())
    created = change_rows(alice.get("/audit").get_data(as_text=True))
    assert [row[0] for row in created] == [
        "Name",
        "Key",
        "Job",
        "Message parameter",
        "Cron expression",
        "Time zone",
        "After downtime (missed fire times)",
        "When the previous run is still going",
        "Active",
        "Notify emails",
        "Notify webhook URL",
        "Pause after N failed runs",
        "Jitter (seconds)",
        "Calendar",
        "When the calendar is closed",
    ]
    assert {row[1] for row in created} == {NOTHING}
    assert created[2][2] == "Echo a message (demo.echo)"
    # Empty optional fields say what they mean, never JSON's [] or null.
    assert [tuple(map(html.unescape, row)) for row in created[-6:-2]] == [
        ("Notify emails", NOTHING, "none: the tenant's default recipients"),
        ("Notify webhook URL", NOTHING, "none: the tenant's default webhook"),
        ("Pause after N failed runs", NOTHING, "never"),
        ("Jitter (seconds)", NOTHING, "the tenant's default"),
    ]


def test_run_now_queues_a_manual_run_and_shows_its_status_in_place(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    response = alice.post(f"/schedules/{data.report.id}/run")
    assert response.status_code == 200
    run = db.session.scalar(select(Run).order_by(Run.id.desc()))
    assert run is not None and run.trigger == "manual" and run.status == "queued"
    assert run.requested_by == world.alice.id
    badge = response.get_data(as_text=True)
    assert f'id="{dom_id(run, "status")}"' in badge
    # Polling four times a second for its first seconds: a Run now's result shows within one.
    assert f'hx-get="/runs/{run.id}/status"' in badge and 'hx-trigger="every 250ms"' in badge
    assert "hx-swap-oob" in badge  # the message
    # A worker finishes it: the badge stops polling and shows the duration.
    run.status, run.started_at = "succeeded", datetime.now(UTC)
    run.finished_at = run.started_at + timedelta(seconds=2)
    db.session.commit()
    done = alice.get(f"/runs/{run.id}/status", htmx=True).get_data(as_text=True)
    assert "succeeded" in done and "2.0 s" in done and "hx-trigger" not in done


def test_pause_and_resume_swap_the_row(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    paused = alice.post(f"/schedules/{data.report.id}/pause").get_data(as_text=True)
    assert f'<tr id="{dom_id(data.report)}"' in paused and ">Resume<" in paused
    question = alice.get(f"/schedules/{data.report.id}/resume", htmx=True).get_data(as_text=True)
    assert "skip missed" in question and "catch up" in question
    resumed = alice.post(f"/schedules/{data.report.id}/resume", {"missed": "catch_up"})
    assert ">Pause<" in resumed.get_data(as_text=True)
    event = db.session.scalar(select(AuditEvent).order_by(AuditEvent.id.desc()))
    assert event is not None and event.after == {"active": True, "catch_up": True}


def test_resuming_a_schedule_the_tick_would_refuse_answers_409_not_500(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    alice.post(f"/schedules/{data.report.id}/pause")
    db.session.execute(
        update(Schedule).where(Schedule.id == data.report.id).values(time_zone="posix/UTC")
    )
    db.session.commit()
    response = alice.post(f"/schedules/{data.report.id}/resume", {"missed": "skip"})
    assert response.status_code == 409
    assert "cannot resume: unknown time zone &#39;posix/UTC&#39;" in response.get_data(as_text=True)
    db.session.expire_all()
    assert db.session.get_one(Schedule, data.report.id).active is False


def test_delete_removes_the_schedule_and_keeps_its_history(
    app: Flask, world: World, data: Seeded
) -> None:
    report_id, run_id, paused_id = data.report.id, data.succeeded.id, data.paused.id
    alice = Panel(app, world.alice)
    response = alice.post(f"/schedules/{report_id}/delete")
    assert response.status_code == 200
    db.session.expunge_all()
    assert db.session.get(Schedule, report_id) is None
    assert db.session.get(Run, run_id) is not None
    plain = alice.post(f"/schedules/{paused_id}/delete", htmx=False)
    assert plain.status_code == 303 and plain.headers["Location"] == "/"


def test_a_schedule_created_after_deleting_the_newest_gets_a_new_id_and_a_clean_trail(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    created = alice.post("/schedules/new", schedule_form(name="Newest"))
    old_id = int(created.headers["HX-Redirect"].rsplit("/", 1)[1])
    alice.post(f"/schedules/{old_id}/run")
    assert alice.post(f"/schedules/{old_id}/delete").status_code == 200
    old_events = db.session.scalars(
        select(AuditEvent).where(AuditEvent.object_id == old_id).order_by(AuditEvent.id)
    ).all()
    assert [event.action for event in old_events] == [
        "schedule.created",
        "schedule.run_now",
        "schedule.deleted",
    ]
    again = alice.post("/schedules/new", schedule_form(name="Created after"))
    new_id = int(again.headers["HX-Redirect"].rsplit("/", 1)[1])
    assert new_id != old_id
    page = alice.get(f"/schedules/{new_id}").get_data(as_text=True)
    assert "Created after" in page
    for event in old_events:
        assert f'id="{dom_id(event)}"' not in page
    new_event = db.session.scalar(select(AuditEvent).where(AuditEvent.object_id == new_id))
    assert new_event is not None and f'id="{dom_id(new_event)}"' in page


def test_the_schedule_detail_shows_settings_fires_history_and_audit(
    app: Flask, world: World, data: Seeded
) -> None:
    page = Panel(app, world.alice).get(f"/schedules/{data.report.id}").get_data(as_text=True)
    assert "At 02:00" in page and "alpha-secret-message" in page
    assert len(re.findall(r"<li><time", page)) == 10
    assert f'id="{dom_id(data.succeeded)}"' in page and f'id="{dom_id(data.failed)}"' in page
    assert "created" in page and "alice@example.com" in page


def test_run_detail_escapes_output_and_error(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    output = alice.get(f"/runs/{data.succeeded.id}").get_data(as_text=True)
    assert "alpha-output-line &lt;script&gt;x&lt;/script&gt;" in output
    assert "<script>x" not in output
    error = alice.get(f"/runs/{data.failed.id}").get_data(as_text=True)
    assert "alpha-error-text &lt;b&gt;bold&lt;/b&gt;" in error


def test_run_history_filters(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    failed = alice.get("/runs?status=failed").get_data(as_text=True)
    assert f'id="{dom_id(data.failed)}"' in failed
    assert f'id="{dom_id(data.succeeded)}"' not in failed
    manual = alice.get("/runs?trigger=manual").get_data(as_text=True)
    assert f'id="{dom_id(data.queued)}"' in manual and f'id="{dom_id(data.failed)}"' not in manual
    today = datetime.now(UTC).date()
    future = alice.get(f"/runs?from={today + timedelta(days=2)}").get_data(as_text=True)
    assert "No runs match" in future
    ranged = alice.get(f"/runs?from={today - timedelta(days=1)}&to={today + timedelta(days=1)}")
    assert f'id="{dom_id(data.failed)}"' in ranged.get_data(as_text=True)


def test_run_history_pages_by_keyset(app: Flask, world: World, data: Seeded) -> None:
    for minute in range(60):
        make_run(data.report, "succeeded", 200 + minute)
    db.session.commit()
    alice = Panel(app, world.alice)
    first = alice.get("/runs").get_data(as_text=True)
    ids = [int(i) for i in re.findall(r'<tr id="run-(\d+)"', first)]
    assert len(ids) == 50 and ids == sorted(ids, reverse=True)
    older = re.search(r'hx-get="(/runs\?before=\d+[^"]*)"', first)
    assert older is not None
    second = alice.get(older.group(1).replace("&amp;", "&"), htmx=True).get_data(as_text=True)
    more = [int(i) for i in re.findall(r'<tr id="run-(\d+)"', second)]
    assert len(more) == 13 and max(more) < min(ids)  # 3 seeded + 60, in alpha only
    assert "runs-more" not in second and "<html" not in second


def test_the_history_shows_names_as_text_and_a_deleted_schedule_by_its_job(
    app: Flask, world: World
) -> None:
    named = make_schedule(world.alpha, "Nightly <b>bold</b>", by=world.alice, cron="0 * * * *")
    gone = make_schedule(world.alpha, "Gone soon", by=world.alice, cron="0 * * * *")
    shown, orphan = make_run(named, "succeeded", 5), make_run(gone, "failed", 4)
    db.session.commit()
    shown_id, orphan_id = shown.id, orphan.id
    alice = Panel(app, world.alice)
    assert alice.post(f"/schedules/{gone.id}/delete").status_code == 200
    page = alice.get("/runs").get_data(as_text=True)
    row = re.search(rf'<tr id="run-{shown_id}">.*?</tr>', page, re.S)
    assert row is not None
    assert "Nightly &lt;b&gt;bold&lt;/b&gt;" in row.group(0) and "<b>bold" not in page
    deleted = re.search(rf'<tr id="run-{orphan_id}">.*?</tr>', page, re.S)
    assert deleted is not None and "demo.echo (deleted)" in deleted.group(0)


def test_per_schedule_history_of_another_tenant_is_404(
    app: Flask, world: World, data: Seeded
) -> None:
    assert Panel(app, world.charlie).get(f"/runs?schedule={data.report.id}").status_code == 404


def test_next_runs_lists_the_next_24_hours_in_the_tenant_zone(
    app: Flask, world: World, data: Seeded
) -> None:
    page = Panel(app, world.alice).get("/upcoming").get_data(as_text=True)
    shown = [schedule_id for _, schedule_id in upcoming_rows(page)]
    assert shown == [data.report.id]  # daily; the paused one is left out, of the filter too
    assert "Alpha paused cleanup" not in page
    assert "CET" in page or "CEST" in page


def upcoming_rows(page: str) -> list[tuple[str, int]]:
    """(fire time, schedule id) of every row of a Next runs page, in order."""
    return [
        (at, int(schedule_id))
        for at, schedule_id in re.findall(
            r'<tr>\s*<td[^>]*><time datetime="([^"]+)".*?href="/schedules/(\d+)"', page, re.S
        )
    ]


def test_next_runs_are_grouped_by_local_day_and_paged_50_at_a_time(
    app: Flask, world: World
) -> None:
    # Three schedules firing at the same times: pages end between fires of the same instant.
    for name in ("Every ten A", "Every ten B", "Every ten C"):
        make_schedule(world.alpha, name, by=world.alice, cron="*/10 * * * *")
    alice = Panel(app, world.alice)
    first = alice.get("/upcoming").get_data(as_text=True)
    rows = upcoming_rows(first)
    assert len(rows) == 50  # bounded
    seen = list(rows)
    later = re.search(r'<a href="(/upcoming\?[^"]+)" hx-get', first)
    while later is not None:
        page = alice.get(later.group(1).replace("&amp;", "&"), htmx=True).get_data(as_text=True)
        assert "<html" not in page and 'id="upcoming"' not in page  # appended in place
        rows = upcoming_rows(page)
        assert 0 < len(rows) <= 50
        seen += rows
        later = re.search(r'<a href="(/upcoming\?[^"]+)" hx-get', page)
    # 144 fires each in 24 hours (a few more if a 10-minute mark passed between the pages):
    # each fire once, in order, none missed.
    assert 432 <= len(seen) <= 435 and len(set(seen)) == len(seen)
    assert seen == sorted(seen, key=lambda row: (datetime.fromisoformat(row[0]), row[1]))
    # Each day's heading names the tenant's local day (Europe/Berlin) of every row under it.
    berlin = ZoneInfo("Europe/Berlin")
    sections = first.split('<section class="upcoming-day">')[1:]
    assert 1 <= len(sections) <= 2
    for section in sections:
        heading = re.search(r"<h2>(.*?)</h2>", section, re.S)
        assert heading is not None
        for at, _ in upcoming_rows(section):
            day = datetime.fromisoformat(at).astimezone(berlin)
            assert f"{day:%A} {day.day} {day:%B %Y}" in heading.group(1)


def test_fires_are_grouped_by_their_day_in_the_zone_shown() -> None:
    schedule = Schedule(id=1, name="s")
    fires = [Fire(datetime(2026, 12, 3, hour, 30, tzinfo=UTC), schedule, None) for hour in (22, 23)]
    berlin = by_day(fires, "Europe/Berlin")  # 23:30 and 00:30 the next day
    assert [(day.isoformat(), len(group)) for day, group in berlin] == [
        ("2026-12-03", 1),
        ("2026-12-04", 1),
    ]
    assert [(day.isoformat(), len(group)) for day, group in by_day(fires, "UTC")] == [
        ("2026-12-03", 2)
    ]


def test_a_schedules_fires_in_a_row_fold_under_the_first_unless_a_row_of_their_own() -> None:
    often, rare = Schedule(id=1, name="often"), Schedule(id=2, name="rare")
    start = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)

    def at(minutes: int) -> datetime:
        return start + timedelta(minutes=minutes)

    fires = [
        *(Fire(at(minutes), often, None) for minutes in (0, 7, 14, 18)),  # 4 in a row
        Fire(at(20), rare, None),
        Fire(at(21), often, None),
        Fire(at(28), often, None),  # 2 in a row: not folded
        Fire(at(30), rare, None),
        Fire(at(35), often, None),
        Fire(at(35), often, None, run_id=9),  # a one-off: its own row (its Cancel button)
        Fire(at(42), often, "02:30 does not exist on this day: runs at 03:00"),
        Fire(at(49), often, None),
    ]
    rows = [(fire.at, fire.schedule.name, more) for fire, more in folded(fires)]
    assert rows == [
        (at(0), "often", Folded(3, timedelta(minutes=4), timedelta(minutes=7), at(18))),
        (at(20), "rare", None),
        (at(21), "often", None),
        (at(28), "often", None),
        (at(30), "rare", None),
        (at(35), "often", None),
        (at(35), "often", None),
        (at(42), "often", None),
        (at(49), "often", None),
    ]


@pytest.mark.parametrize(
    "query",
    [
        "after=2026-01-01T00:00%2B00:00",
        "after_id=3",
        "after=yesterday&after_id=3",
        "after=2026-01-01T00:00&after_id=3",
        "after=2026-01-01T00:00Z&after_id=x",
        "after_run=5",
        "after=2026-01-01T00:00Z&after_run=5",
        "after=2026-01-01T00:00Z&after_id=3&after_run=x",
    ],
)
def test_a_bad_next_runs_cursor_is_a_400(app: Flask, world: World, query: str) -> None:
    assert Panel(app, world.alice).get(f"/upcoming?{query}").status_code == 400


def test_the_header_toggle_shows_every_time_in_utc_and_back(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    detail = f"/runs/{data.succeeded.id}"
    local = alice.get(detail).get_data(as_text=True)
    assert 'aria-pressed="true">Local</button>' in local
    assert re.search(r"<time [^>]*title=\"[^\"]+ UTC\">\d{4}-\d\d-\d\d \d\d:\d\d CES?T ", local)
    response = alice.post("/times", {"times": "utc", "next": f"{detail}?x=1"}, htmx=False)
    assert response.status_code == 303 and response.headers["Location"] == f"{detail}?x=1"
    utc = alice.get(detail).get_data(as_text=True)
    assert 'aria-pressed="true">UTC</button>' in utc
    # UTC shown, the tenant's local time in the title.
    assert re.search(r"<time [^>]*title=\"[^\"]+ CES?T\">\d{4}-\d\d-\d\d \d\d:\d\d UTC ", utc)
    assert "who did what, in UTC" in alice.get("/audit").get_data(as_text=True)
    preview = alice.get(
        "/schedules/form/preview?cron=30 2 * * *&time_zone=America/New_York"
        "&preview_from=2027-03-14",
        htmx=True,
    ).get_data(as_text=True)
    assert '03:00 EDT (-04:00)</time> <span class="nowrap">= 07:00 UTC</span>' in preview
    assert alice.post("/times", {"times": "local"}, htmx=False).headers["Location"] == "/"
    assert 'aria-pressed="true">Local</button>' in alice.get(detail).get_data(as_text=True)


@pytest.mark.parametrize(
    ("form", "status"),
    [({"times": "mars"}, 400), ({}, 400), ({"times": "utc", "next": "//evil.example"}, 303)],
)
def test_the_times_toggle_refuses_bad_input_and_foreign_targets(
    app: Flask, world: World, form: dict[str, str], status: int
) -> None:
    alice = Panel(app, world.alice)
    response = alice.post("/times", form, htmx=False)
    assert response.status_code == status
    if status == 303:
        assert response.headers["Location"] == "/"
    assert alice.post("/times", {"times": "utc"}, htmx=False, csrf=False).status_code == 400


def test_the_tenant_switcher_changes_the_current_tenant(
    app: Flask, world: World, data: Seeded
) -> None:
    from webapp.services.accounts import add_user

    add_user("alice@example.com", "beta", "viewer", None)
    alice = Panel(app, world.alice)
    page = alice.get("/").get_data(as_text=True)
    assert 'id="tenant-switch"' in page and "Alpha nightly report" in page
    response = alice.post("/tenant", {"tenant": str(world.beta.id)}, htmx=False)
    assert response.status_code == 303
    beta = alice.get("/").get_data(as_text=True)
    assert "Beta hourly ping" in beta and "Alpha nightly report" not in beta
    assert "Run now" not in beta  # a viewer there
    assert alice.get(f"/schedules/{data.report.id}").status_code == 404
    charlie = Panel(app, world.charlie)
    assert charlie.post("/tenant", {"tenant": str(world.alpha.id)}, htmx=False).status_code == 404


def test_a_user_without_tenant_is_told_what_to_do(app: Flask, world: World) -> None:
    from webapp.models import User
    from webapp.services.accounts import hash_password

    lonely = User(email="lonely@example.com", password_hash=hash_password("x" * 12))
    db.session.add(lonely)
    db.session.commit()
    response = Panel(app, lonely).get("/runs")
    assert response.status_code == 403 and "No tenant yet" in response.get_data(as_text=True)


def test_next_runs_with_2000_active_schedules_shows_its_bound(app: Flask, world: World) -> None:
    # One through the service, 1999 copies of its row in one statement (2000 service calls took
    # most of this test's time): the same columns, the next fire the service gave it.
    first = make_schedule(world.alpha, "Every minute 0000", by=world.alice, cron="* * * * *")
    row = {column.key: getattr(first, column.key) for column in Schedule.__table__.columns}
    del row["id"]
    copies = [
        {**row, "key": f"{first.key}-{number:04}", "name": f"Every minute {number:04}"}
        for number in range(1, 2000)
    ]
    db.session.execute(insert(Schedule), copies)
    db.session.commit()
    assert db.session.scalar(select(func.count()).select_from(Schedule)) == 2000
    page = Panel(app, world.alice).get("/upcoming").get_data(as_text=True)
    rows = upcoming_rows(page)
    # The first minute's fires, one per schedule in id order, 50 of them: the merge stops there.
    assert len(rows) == 50
    assert len({at for at, _ in rows}) == 1
    assert [schedule_id for _, schedule_id in rows] == sorted(
        schedule_id for _, schedule_id in rows
    )
    assert "Later fire times" in page
