"""The schedule builder in the form: Repeat and its fields write the cron expression; without
JavaScript a post saves the builder's cron (or "Update cron" shows it and saves nothing), with
htmx the preview follows each change; an existing schedule opens in its shape."""

from __future__ import annotations

import html

import pytest
from flask import Flask
from sqlalchemy import select
from werkzeug.test import TestResponse

from tests.conftest import World, make_schedule
from tests.panel_helpers import Panel, schedule_form
from webapp import cron
from webapp.extensions import db
from webapp.models import Schedule

# Each shape as the form posts it (repeat_<name> fields) and the cron that saving stores.
SHAPES: list[tuple[dict[str, object], str]] = [
    ({"repeat": "minutes", "minutes": "15"}, "*/15 * * * *"),
    ({"repeat": "hours", "hours": "2", "minute": "30"}, "30 */2 * * *"),
    ({"repeat": "daily", "times": "6:00, 18:00"}, "0 6,18 * * *"),
    ({"repeat": "weekdays", "times": "09:30"}, "30 9 * * 1-5"),
    ({"repeat": "weekly", "days": ["1", "4"], "times": "8:00"}, "0 8 * * 1,4"),
    ({"repeat": "monthly", "on": "day", "day": "15", "times": "12:00"}, "0 12 15 * *"),
    ({"repeat": "monthly", "on": "L", "times": "23:00"}, "0 23 L * *"),
    ({"repeat": "monthly", "on": "LW", "times": "18:00"}, "0 18 LW * *"),
    ({"repeat": "monthly", "on": "2", "weekday": "2", "times": "8:00"}, "0 8 * * 2#2"),
    ({"repeat": "monthly", "on": "last", "weekday": "5", "times": "17:00"}, "0 17 * * 5#L"),
    ({"repeat": "yearly", "month": "1", "day": "1", "times": "06:00"}, "0 6 1 1 *"),
]


def builder_post(shape: dict[str, object], **changes: object) -> dict[str, object]:
    """The form as a browser without JavaScript posts it: the cron field as shown (hourly),
    the builder's fields of `shape` as shown, and `changes`."""
    fields: dict[str, object] = {"repeat": shape["repeat"]}
    fields |= {f"repeat_{name}": value for name, value in shape.items() if name != "repeat"}
    as_shown = {
        key: ",".join(value) if isinstance(value, list) else str(value)
        for key, value in fields.items()
    }
    fields["repeat_shown"] = cron.builder_shown(as_shown)
    shown = {"name": "Built", "cron": "0 * * * *", "cron_as_shown": "0 * * * *"}
    return {**schedule_form(**shown), **fields, **changes}


def post_new(alice: Panel, shape: dict[str, object], **changes: object) -> TestResponse:
    """A new schedule's form posted without JavaScript (see builder_post)."""
    return alice.post("/schedules/new", builder_post(shape, **changes), htmx=False)


def stored(name: str = "Built") -> Schedule | None:
    return db.session.scalar(select(Schedule).where(Schedule.name == name))


def text(response: object) -> str:
    return html.unescape(response.get_data(as_text=True))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("shape", "expected"), SHAPES, ids=[e for _, e in SHAPES])
def test_saving_with_the_builder_stores_its_cron(
    app: Flask, world: World, shape: dict[str, object], expected: str
) -> None:
    alice = Panel(app, world.alice)
    response = post_new(alice, shape)
    assert response.status_code == 303, text(response)
    schedule = stored()
    assert schedule is not None and schedule.cron == expected
    # Its edit form opens in the same shape, its fields as saved.
    page = text(alice.get(f"/schedules/{schedule.id}/edit"))
    assert f'<option value="{shape["repeat"]}" selected>' in page
    shown = cron.builder_shown(cron.shape_of(expected).fields())
    assert f'name="repeat_shown" value="{shown}"' in page
    assert f'value="{expected}"' in page  # the cron field


def test_a_new_schedule_opens_in_the_shape_of_its_cron(app: Flask, world: World) -> None:
    page = text(Panel(app, world.alice).get("/schedules/new"))
    assert '<label for="repeat">Repeat</label>' in page
    assert '<option value="hours" selected>Every N hours</option>' in page
    assert 'id="repeat_hours" name="repeat_hours" value="1"' in page
    assert 'id="repeat_minute" name="repeat_minute" value="0"' in page
    assert 'name="update_cron"' in page


def test_an_edit_opens_in_its_shape_or_custom_and_an_untouched_save_keeps_the_cron(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    last_friday = make_schedule(world.alpha, "Month end", by=world.alice, cron="30 17 * * 5#L")
    custom = make_schedule(world.alpha, "Odd", by=world.alice, cron="0 9 * * MON-FRI")
    db.session.commit()
    page = text(alice.get(f"/schedules/{last_friday.id}/edit"))
    assert '<option value="monthly" selected>' in page
    assert '<option value="last" selected>The last …</option>' in page
    assert '<option value="5" selected>Friday</option>' in page
    assert 'name="repeat_times" value="17:30"' in page
    page = text(alice.get(f"/schedules/{custom.id}/edit"))
    assert '<option value="custom" selected>' in page and 'name="repeat_times"' not in page
    # Saved untouched (the builder's fields as shown), each keeps its cron exactly.
    untouched: list[tuple[Schedule, dict[str, object]]] = [
        (last_friday, {**SHAPES[9][0], "times": "17:30"}),
        (custom, {"repeat": "custom"}),
    ]
    for schedule, shape in untouched:
        post = builder_post(
            shape, name=schedule.name, cron=schedule.cron, cron_as_shown=schedule.cron
        )
        response = alice.post(f"/schedules/{schedule.id}/edit", post, htmx=False)
        assert response.status_code == 303, text(response)
    db.session.refresh(last_friday)
    db.session.refresh(custom)
    assert (last_friday.cron, custom.cron) == ("30 17 * * 5#L", "0 9 * * MON-FRI")


def test_update_cron_without_javascript_shows_the_builders_cron_and_saves_nothing(
    app: Flask, world: World
) -> None:
    response = post_new(Panel(app, world.alice), SHAPES[3][0], update_cron="1")
    assert response.status_code == 200
    page = text(response)
    assert 'id="cron" name="cron" value="30 9 * * 1-5"' in page
    assert "At 09:30, Monday through Friday" in page
    assert stored() is None


def test_a_new_repeat_shows_its_fields_before_it_is_saved(app: Flask, world: World) -> None:
    """Without JavaScript, Repeat set to another shape has not shown its fields: Update cron
    shows them with their defaults; Save does the same and says so, saving nothing."""
    alice = Panel(app, world.alice)
    switched = builder_post({"repeat": "hours", "hours": "1", "minute": "0"}, repeat="weekly")
    page = text(alice.post("/schedules/new", {**switched, "update_cron": "1"}, htmx=False))
    assert 'name="repeat_days" value="1" checked' in page  # Monday, by default
    assert 'name="repeat_times" value="09:00"' in page
    assert 'id="cron" name="cron" value="0 9 * * 1"' in page
    response = alice.post("/schedules/new", switched, htmx=False)
    assert response.status_code == 422
    assert "check this repeat's details below, then save" in text(response)
    assert 'id="cron" name="cron" value="0 9 * * 1"' in text(response)
    assert stored() is None


@pytest.mark.parametrize(
    ("shape", "field", "message"),
    [
        ({"repeat": "minutes", "minutes": "0"}, "repeat_minutes", "a whole number from 1 to 59"),
        ({"repeat": "hours", "hours": "2", "minute": "60"}, "repeat_minute", "from 0 to 59"),
        ({"repeat": "monthly", "on": "day", "day": "32", "times": "9:00"}, "repeat_day", "1 to 31"),
        ({"repeat": "weekly", "times": "9:00"}, "repeat_days", "choose at least one day"),
        ({"repeat": "daily", "times": "9:00, 17:30"}, "repeat_times", "cannot be one cron"),
    ],
)
def test_bad_builder_input_is_told_beside_its_field_and_nothing_is_saved(
    app: Flask, world: World, shape: dict[str, object], field: str, message: str
) -> None:
    response = post_new(Panel(app, world.alice), shape)
    assert response.status_code == 422
    page = text(response)
    assert f'id="{field}-error">' in page and message in page
    # The field points at its message: aria-describedby, aria-invalid.
    assert f'{field}-error" aria-invalid="true"' in page
    assert stored() is None


def test_the_builder_and_a_hand_edited_cron_that_disagree_are_refused(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    response = post_new(alice, SHAPES[3][0], cron="*/5 * * * *")
    assert response.status_code == 422
    assert "the builder says 30 9 * * 1-5 but the cron expression is */5 * * * *" in text(response)
    assert stored() is None
    # Custom leaves the cron to the cron field, even chosen just now (its fields not shown).
    for shown in ("custom", "weekdays"):
        post = builder_post({"repeat": "custom"}, cron="*/5 * * * *", repeat_shown=shown)
        response = alice.post("/schedules/new", {**post, "name": shown}, htmx=False)
        assert response.status_code == 303, text(response)
        schedule = stored(shown)
        assert schedule is not None and schedule.cron == "*/5 * * * *"


def test_the_live_preview_follows_the_builder(app: Flask, world: World) -> None:
    alice = Panel(app, world.alice)
    query = {"repeat": "monthly", "repeat_shown": "hours", "repeat_on": "last"}
    query |= {"repeat_weekday": "5", "repeat_times": "17:00", "time_zone": "UTC"}
    live = text(alice.get("/schedules/form/preview", query_string=query, htmx=True))
    assert "Cron expression: <code" in live and ">0 17 * * 5#L</code>" in live
    assert "At 17:00, on the last Friday of the month" in live
    # The cron field filled, "Describe it" emptied, the new Repeat's fields shown: out of band.
    assert 'id="cron" name="cron" value="0 17 * * 5#L"' in live
    assert 'id="phrase" name="phrase" value=""' in live
    assert '<div id="repeat-fields" class="builder-fields" hx-swap-oob="true">' in live
    # Fields already shown are not sent again (the one being typed in keeps its caret).
    query["repeat_shown"] = "monthly:weekday"
    again = text(alice.get("/schedules/form/preview", query_string=query, htmx=True))
    assert 'id="repeat-fields"' not in again
    bad = text(
        alice.get(
            "/schedules/form/preview",
            query_string={"repeat": "minutes", "repeat_shown": "minutes", "repeat_minutes": "0"},
            htmx=True,
        )
    )
    assert 'data-field="repeat_minutes"' in bad and "Every (minutes): a whole number" in bad
    assert 'id="cron"' not in bad


def test_a_typed_cron_or_phrase_opens_its_shape_in_the_builder(app: Flask, world: World) -> None:
    alice = Panel(app, world.alice)
    preview = "/schedules/form/preview"
    typed = {"cron": "0 8 * * 1,4", "time_zone": "UTC", "builder": "sync"}
    live = text(alice.get(preview, query_string=typed, htmx=True))
    assert '<div id="schedule-builder" class="builder" hx-swap-oob="true">' in live
    assert '<option value="weekly" selected>' in live
    assert 'name="repeat_days" value="4" checked' in live
    described = {"phrase": "the last day of the month at 23:00", "cron": "0 * * * *"}
    live = text(alice.get(preview, query_string={**typed, **described}, htmx=True))
    assert '<option value="monthly" selected>' in live and '<option value="L" selected>' in live
    odd = text(alice.get(preview, query_string={**typed, "cron": "*/10 9-16 * * *"}, htmx=True))
    assert '<option value="custom" selected>' in odd
    # The zone or the preview's start do not touch the builder.
    zone = text(alice.get(preview, query_string={"cron": "0 8 * * 1,4", "time_zone": "UTC"}))
    assert 'id="schedule-builder"' not in zone
