"""Hostile and odd input to the panel: relative times at every boundary, ids that are not plain
ASCII numbers or do not fit a 4-byte integer, dates out of range, NUL characters, and the
schedule list's keyset pages. None of it may answer 500, on SQLite or on PostgreSQL."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from sqlalchemy import select

from tests.conftest import PASSWORD, World, make_schedule
from tests.panel_helpers import Panel, Seeded, csrf_token, seed
from webapp.extensions import db
from webapp.models import Schedule
from webapp.web import formatting
from webapp.web import schedules as schedule_views
from webapp.web.params import MAX_ID, parse_id

T0 = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)


@pytest.fixture
def data(world: World) -> Seeded:
    return seed(world)


# 1. relative_time -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "future", "past"),
    [
        (0, "just now", "just now"),
        (1, "in a few seconds", "just now"),
        (44, "in a few seconds", "just now"),
        (44.999, "in a few seconds", "just now"),
        (45, "in 1 min", "1 min ago"),
        (50, "in 1 min", "1 min ago"),
        (59, "in 1 min", "1 min ago"),
        (59.999, "in 1 min", "1 min ago"),
        (60, "in 1 min", "1 min ago"),
        (89, "in 1 min", "1 min ago"),
        (91, "in 2 min", "2 min ago"),
        (3599, "in 60 min", "60 min ago"),
        (3600, "in 1 h", "1 h ago"),
        (5 * 3600, "in 5 h", "5 h ago"),
        (86400, "in 1 day", "1 day ago"),
        (3 * 86400, "in 3 days", "3 days ago"),
    ],
)
def test_relative_time_has_a_text_for_every_distance(
    seconds: float, future: str, past: str
) -> None:
    delta = timedelta(seconds=seconds)
    assert formatting.relative_time(T0 + delta, T0) == future
    assert formatting.relative_time(T0 - delta, T0) == past


def test_pages_render_when_the_next_run_is_45_to_60_seconds_away(
    app: Flask, world: World, data: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `* * * * *` schedule is 45-59 s from its next run for 15 s of every minute."""
    next_run = data.report.next_run_at
    assert next_run is not None
    alice = Panel(app, world.alice)
    for seconds in (45, 50, 59):
        monkeypatch.setattr(formatting, "utcnow", lambda s=seconds: next_run - timedelta(seconds=s))
        for url in ("/", f"/schedules/{data.report.id}", "/upcoming"):
            response = alice.get(url)
            assert response.status_code == 200, (url, seconds)
            if url == "/":
                assert "in 1 min" in response.get_data(as_text=True)


# 2. ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        ("42", 42),
        (str(MAX_ID), MAX_ID),
        ("", None),
        ("0", None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1.0", None),
        ("²", None),
        ("٣", None),  # ARABIC-INDIC DIGIT THREE: int() accepts it
        ("\uff11", None),  # FULLWIDTH DIGIT ONE
        (str(MAX_ID + 1), None),
        ("9" * 23, None),
        ("9" * 5000, None),
    ],
)
def test_parse_id_accepts_only_ascii_digits_that_fit_a_4_byte_integer(
    text: str, expected: int | None
) -> None:
    assert parse_id(text) == expected


BAD_IDS = ["%C2%B2", "%D9%A3", "0", "-1", "abc", "99999999999999999999999", str(MAX_ID + 1)]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_id_in_a_filter_answers_400_with_a_message(
    app: Flask, world: World, data: Seeded, bad: str
) -> None:
    alice = Panel(app, world.alice)
    for url in (
        f"/runs?before={bad}",
        f"/runs?schedule={bad}",
        f"/audit?before={bad}",
        f"/?after={bad}&after_name=x",
    ):
        for htmx in (False, True):
            response = alice.get(url, htmx=htmx)
            assert response.status_code == 400, (url, htmx, response.status_code)
            assert "not a valid id" in response.get_data(as_text=True), url


def test_the_largest_id_is_a_valid_filter(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    assert alice.get(f"/runs?before={MAX_ID}").status_code == 200
    assert alice.get(f"/audit?before={MAX_ID}").status_code == 200
    assert alice.get(f"/runs?schedule={MAX_ID}").status_code == 404  # no such schedule


@pytest.mark.parametrize("bad", ["²", "٣", "abc", "", "99999999999999999999999"])
def test_switching_to_a_bad_tenant_id_answers_400(app: Flask, world: World, bad: str) -> None:
    response = Panel(app, world.alice).post("/tenant", {"tenant": bad}, htmx=False)
    assert response.status_code == 400


@pytest.mark.parametrize(
    "bad", ["9999999999999999999", str(MAX_ID + 1), "%C2%B2", "%D9%A3", "%EF%BC%91", "-1"]
)
def test_an_id_in_the_path_that_is_no_4_byte_integer_answers_404(
    app: Flask, world: World, data: Seeded, bad: str
) -> None:
    alice = Panel(app, world.alice)
    for url in (
        f"/runs/{bad}",
        f"/runs/{bad}/status",
        f"/schedules/{bad}",
        f"/schedules/{bad}/edit",
        f"/schedules/{bad}/resume",
    ):
        for htmx in (False, True):
            assert alice.get(url, htmx=htmx).status_code == 404, (url, htmx)
    for action in ("run", "pause", "resume", "delete", "edit"):
        response = alice.post(f"/schedules/{bad}/{action}", {"missed": "skip"})
        assert response.status_code == 404, (action, response.status_code)


def test_route_ids_still_work_and_the_largest_id_is_a_plain_404(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    assert alice.get(f"/schedules/{data.report.id}").status_code == 200
    assert alice.get(f"/runs/{data.succeeded.id}").status_code == 200
    assert alice.get(f"/runs/{MAX_ID}").status_code == 404
    assert alice.get(f"/schedules/{MAX_ID}/edit").status_code == 404
    assert alice.post(f"/schedules/{MAX_ID}/run").status_code == 404


def test_a_run_shown_twice_on_a_page_has_two_ids_and_keeps_its_own_when_polled(
    app: Flask, world: World, data: Seeded
) -> None:
    alice = Panel(app, world.alice)
    page = alice.get(f"/schedules/{data.report.id}").get_data(as_text=True)
    queued = data.queued.id
    assert page.count(f'id="run-{queued}-status"') == 1  # as the last run
    assert page.count(f'id="run-{queued}-history-status"') == 1  # in the history
    # The history's row polls itself whole, its badge keeping its place.
    row_url = f"/runs/{queued}/status?place=history&row=schedule"
    assert f'<tr id="run-{queued}" hx-get="{row_url.replace("&", "&amp;")}"' in page
    polled = alice.get(row_url, htmx=True).get_data(as_text=True)
    assert f'<tr id="run-{queued}"' in polled
    assert f'id="run-{queued}-history-status"' in polled
    plain = alice.get(f"/runs/{queued}/status", htmx=True).get_data(as_text=True)
    assert f'id="run-{queued}-status"' in plain
    assert alice.get(f"/runs/{queued}/status?place=x", htmx=True).status_code == 400


# 2b. other filters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/runs?status=bogus",
        "/runs?trigger=bogus",
        "/?status=bogus",
        "/?after=1",  # a cursor needs its name
    ],
)
def test_an_unknown_filter_value_answers_400(
    app: Flask, world: World, data: Seeded, url: str
) -> None:
    response = Panel(app, world.alice).get(url)
    assert response.status_code == 400, url
    assert "Bad request" in response.get_data(as_text=True)


# 3. dates --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "to=9999-12-31",
        "from=9999-12-31",
        "from=0001-01-01",
        "to=0001-01-01",
        "from=1969-12-31",
        "to=3000-01-01",
        "from=2026-02-30",
        "from=yesterday",
        "from=%EF%BC%92%EF%BC%90%EF%BC%92%EF%BC%96-03-07",  # fullwidth digits
    ],
)
def test_a_date_out_of_range_or_malformed_answers_400(
    app: Flask, world: World, data: Seeded, query: str
) -> None:
    alice = Panel(app, world.alice)
    for htmx in (False, True):
        response = alice.get(f"/runs?{query}", htmx=htmx)
        assert response.status_code == 400, (query, htmx)
        assert "not a date between 1970-01-01 and 2999-12-31" in response.get_data(as_text=True)


def test_the_edges_of_the_date_range_are_accepted(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    response = alice.get("/runs?from=1970-01-01&to=2999-12-31")
    assert response.status_code == 200
    assert f'id="run-{data.failed.id}"' in response.get_data(as_text=True)
    assert alice.get("/runs?from=2999-12-31&to=1970-01-01").status_code == 200
    assert alice.get("/runs?from=&to=").status_code == 200  # an empty field is no filter


# 4. NUL ----------------------------------------------------------------------------------


def test_a_nul_in_a_query_answers_400(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    for url in (
        "/?q=%00",
        "/?job=demo%00",
        "/runs?status=%00",
        "/schedules/form/params?job=demo.echo%00",
        "/schedules/form/preview?cron=*+*+*+*+*&time_zone=UTC%00",
        "/?x%00=1",
        "/schedules/%00",
    ):
        for htmx in (False, True):
            response = alice.get(url, htmx=htmx)
            assert response.status_code == 400, (url, htmx, response.status_code)
            assert "NUL character" in response.get_data(as_text=True)


def test_a_nul_in_a_form_answers_400(app: Flask, world: World, data: Seeded) -> None:
    alice = Panel(app, world.alice)
    form = {
        "name": "x\x00y",
        "job": "demo.echo",
        "args.message": "hello",
        "cron": "*/7 * * * *",
        "time_zone": "UTC",
    }
    response = alice.post("/schedules/new", form)
    assert response.status_code == 400
    assert "NUL character" in response.get_data(as_text=True)
    response = alice.post(f"/schedules/{data.report.id}/edit", {**form, "name": "ok", "cron": "\0"})
    assert response.status_code == 400
    assert alice.post("/tenant", {"tenant": "1\x00"}, htmx=False).status_code == 400


def test_an_anonymous_login_with_a_nul_answers_400_and_records_nothing(
    app: Flask, world: World
) -> None:
    from sqlalchemy import func, select

    from webapp.models import LoginAttempt

    client = app.test_client()
    token = csrf_token(client)
    for data in (
        {"email": "a\x00@b.co", "password": "x"},
        {"email": "alice@example.com", "password": "pass\x00word"},
    ):
        response = client.post("/login", data={**data, "csrf_token": token})
        assert response.status_code == 400
        assert "NUL character" in response.get_data(as_text=True)
    assert db.session.scalar(select(func.count()).select_from(LoginAttempt)) == 0
    response = client.post(
        "/login", data={"email": "alice@example.com", "password": PASSWORD, "csrf_token": token}
    )
    assert response.status_code == 303  # the guard lets a clean request through


# 6. schedule list pages ------------------------------------------------------------------


def add_schedules(world: World, names: list[str]) -> None:
    for name in names:
        make_schedule(world.alpha, name, by=world.alice, cron="0 3 * * *")


def shown(page: str) -> list[str]:
    return re.findall(r'<a class="strong" href="/schedules/\d+">([^<]+)</a>', page)


def next_link(page: str) -> str | None:
    found = re.search(r'id="schedules-more".*?hx-get="([^"]+)"', page, re.S)
    return found.group(1).replace("&amp;", "&") if found else None


def test_the_schedule_list_pages_by_name_and_id(
    app: Flask, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedule_views, "LIST_LIMIT", 3)
    # Equal names: the id breaks the tie, so no row is skipped or shown twice.
    names = ["Delta", "alpha", "Bravo", "Bravo", "Bravo", "charlie", "Echo"]
    add_schedules(world, names)
    alice = Panel(app, world.alice)
    first = alice.get("/").get_data(as_text=True)
    seen = shown(first)
    assert len(seen) == 3 and "Load more schedules" in first
    link = next_link(first)
    while link is not None:
        fragment = alice.get(link, htmx=True)
        assert fragment.status_code == 200
        text = fragment.get_data(as_text=True)
        assert "<html" not in text and "<table" not in text  # rows to append
        seen += shown(text)
        link = next_link(text)
        full = alice.get(link or "/").status_code  # the link works without htmx too
        assert full == 200
    # Every schedule once, in the database's own order (its collation decides about case).
    order = select(Schedule.name).where(Schedule.tenant_id == world.alpha.id)
    assert seen == list(db.session.scalars(order.order_by(Schedule.name, Schedule.id)))


def test_the_next_page_keeps_the_filters(
    app: Flask, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedule_views, "LIST_LIMIT", 2)
    add_schedules(world, ["report a", "report b", "report c", "other"])
    alice = Panel(app, world.alice)
    first = alice.get("/?q=report").get_data(as_text=True)
    link = next_link(first)
    assert link is not None and "q=report" in link
    rest = alice.get(link, htmx=True).get_data(as_text=True)
    assert shown(first) + shown(rest) == ["report a", "report b", "report c"]
    assert next_link(rest) is None
    page_two = alice.get(link).get_data(as_text=True)  # without htmx: a whole page
    assert "<html" in page_two and shown(page_two) == ["report c"]
    assert "First page" in page_two


# 7. the run history's schedule filter ----------------------------------------------------


def options(page: str) -> list[str]:
    select_html = page.split('<select id="filter-schedule"')[1].split("</select>")[0]
    return re.findall(r"<option value=\"\d+\"[^>]*>([^<]+)</option>", select_html)


def test_the_schedule_filter_lists_a_bounded_number_of_schedules(
    app: Flask, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webapp.web import runs as run_views

    monkeypatch.setattr(run_views, "SCHEDULE_OPTIONS", 3)
    add_schedules(world, ["report a", "report b", "report c", "report d", "other"])
    chosen = db.session.scalar(
        select(Schedule).where(Schedule.tenant_id == world.alpha.id, Schedule.name == "report d")
    )
    assert chosen is not None
    alice = Panel(app, world.alice)
    page = alice.get("/runs").get_data(as_text=True)
    assert options(page) == ["other", "report a", "report b"]
    assert "type in “Find a schedule” to see others" in page
    # Typing narrows the list (htmx swaps the filter); the chosen schedule stays an option.
    url = f"/runs/schedule-options?schedule_q=PORT&schedule={chosen.id}"
    fragment = alice.get(url, htmx=True)
    text = fragment.get_data(as_text=True)
    assert fragment.status_code == 200 and "<html" not in text
    assert options(text) == ["report d", "report a", "report b", "report c"]
    assert f'<option value="{chosen.id}" selected>' in text
    narrowed = alice.get("/runs?schedule_q=other").get_data(as_text=True)  # without JavaScript
    assert options(narrowed) == ["other"] and "1 schedule whose name contains" in narrowed
    nothing = alice.get("/runs/schedule-options?schedule_q=%25").get_data(as_text=True)
    assert options(nothing) == [] and "No schedule name contains" in nothing
    assert alice.get("/runs/schedule-options?schedule_q=" + "x" * 201).status_code == 400
    assert alice.get("/runs?schedule_q=a%00b").status_code == 400


def test_find_a_schedule_takes_wildcards_and_the_escape_character_literally(
    app: Flask, world: World
) -> None:
    add_schedules(world, ["50% off", "a_b", "axb", "x/y", "x/%y"])
    alice = Panel(app, world.alice)

    def found(text: str) -> list[str]:
        return options(alice.get(f"/runs/schedule-options?schedule_q={text}", htmx=True).text)

    assert found("a_b") == ["a_b"]  # "_" is not any one character
    assert found("50%25") == ["50% off"]  # nor "%" any characters
    assert found("x/y") == ["x/y"]
    assert found("x/%25") == ["x/%y"]
    assert found("X/") == ["x/%y", "x/y"]  # whatever the case


def test_the_schedule_filter_never_offers_another_tenants_schedule(
    app: Flask, world: World
) -> None:
    add_schedules(world, ["alpha only"])
    charlie = Panel(app, world.charlie)
    assert "alpha only" not in charlie.get("/runs?schedule_q=alpha").get_data(as_text=True)
    fragment = charlie.get("/runs/schedule-options?schedule_q=alpha", htmx=True)
    assert "alpha only" not in fragment.get_data(as_text=True)
    # Choosing it by id finds nothing, on the page, its older rows and the filter alike.
    alpha_only = db.session.scalar(select(Schedule.id).where(Schedule.name == "alpha only"))
    for url in (
        f"/runs?schedule={alpha_only}",
        f"/runs?schedule={alpha_only}&before=1000000",
        f"/runs/schedule-options?schedule={alpha_only}",
    ):
        answer = charlie.get(url, htmx=True)
        assert answer.status_code == 404, url
        assert "alpha only" not in answer.get_data(as_text=True)
