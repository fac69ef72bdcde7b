"""Plain English in the schedule form: the "Describe it" box and the cron field preview a
phrase's cron and words before anything is saved, live (htmx) and by a round trip without
JavaScript ("Show cron"); saving stores the cron, never the phrase."""

from __future__ import annotations

import html

from flask import Flask
from sqlalchemy import select

from tests.conftest import World, make_schedule
from tests.panel_helpers import Panel, schedule_form
from webapp.extensions import db
from webapp.models import Schedule


def form_data(**changes: str) -> dict[str, str]:
    """The form as the browser posts it: the cron field as shown (hourly), with `changes`."""
    shown = {"name": "Described", "cron": "0 * * * *", "cron_as_shown": "0 * * * *"}
    return schedule_form(**(shown | changes))


def stored(name: str = "Described") -> Schedule | None:
    return db.session.scalar(select(Schedule).where(Schedule.name == name))


def text(response: object) -> str:
    return html.unescape(response.get_data(as_text=True))  # type: ignore[attr-defined]


def test_the_form_has_a_describe_it_box_that_says_what_saving_stores(
    app: Flask, world: World
) -> None:
    page = text(Panel(app, world.alice).get("/schedules/new"))
    assert '<label for="phrase">Describe it</label>' in page
    assert 'name="show_cron"' in page
    assert "saving stores its cron expression, not the phrase" in page


def test_the_preview_shows_a_phrases_cron_and_words_and_fills_the_cron_field(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    query = {"phrase": "every weekday at 9:30", "cron": "0 * * * *", "time_zone": "UTC"}
    live = text(alice.get("/schedules/form/preview", query_string=query, htmx=True))
    assert "Cron expression: <code" in live and ">30 9 * * 1-5</code>" in live
    assert "At 09:30, Monday through Friday" in live
    # The cron field, out of band, now holds the phrase's cron.
    assert 'id="cron" name="cron" value="30 9 * * 1-5"' in live and 'hx-swap-oob="true"' in live
    # Typed in the cron field itself: the same preview, the field left as typed.
    in_field = text(
        alice.get(
            "/schedules/form/preview",
            query_string={"cron": "on the 1st and 15th at noon", "time_zone": "UTC"},
            htmx=True,
        )
    )
    assert ">0 12 1,15 * *</code>" in in_field and "on day 1 and 15 of the month" in in_field
    assert "hx-swap-oob" not in in_field
    # Cron stays cron, with no "Cron expression" line.
    plain = text(alice.get("/schedules/form/preview?cron=*/5+*+*+*+*&time_zone=UTC", htmx=True))
    assert "Every 5 minutes" in plain and "Cron expression:" not in plain


def test_the_preview_says_what_part_of_a_phrase_it_did_not_understand(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    for field in ("phrase", "cron"):
        answer = text(
            alice.get(
                "/schedules/form/preview",
                query_string={field: "every blue moon at 9", "time_zone": "UTC"},
                htmx=True,
            )
        )
        assert f'data-field="{field}"' in answer
        assert "did not understand “blue”" in answer
        assert "try e.g. “every weekday at 9:30”" in answer
    # Cron's own message for what looks like cron.
    short = text(alice.get("/schedules/form/preview?cron=0+9+*+*&time_zone=UTC", htmx=True))
    assert "too few fields" in short


def test_show_cron_without_javascript_fills_the_cron_field_and_saves_nothing(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    phrase = "every 10 minutes between 9 and 17 on weekdays"
    response = alice.post("/schedules/new", form_data(phrase=phrase, show_cron="1"), htmx=False)
    assert response.status_code == 200
    page = text(response)
    assert 'id="cron" name="cron" value="*/10 9-16 * * 1-5"' in page
    assert f'value="{phrase}"' in page  # the phrase is kept
    assert "Every 10 minutes, between 09:00 and 16:59, Monday through Friday" in page
    assert stored() is None
    # Not understood: said next to the box, nothing saved.
    wrong = alice.post(
        "/schedules/new", form_data(phrase="every blue moon", show_cron="1"), htmx=False
    )
    assert wrong.status_code == 422
    assert 'id="phrase-error"' in text(wrong) and "did not understand “blue”" in text(wrong)
    assert stored() is None


def test_saving_a_phrase_stores_its_cron(app: Flask, world: World) -> None:
    alice = Panel(app, world.alice)
    # In the cron field.
    alice.post("/schedules/new", form_data(cron="the last Friday of the month at 5pm"))
    schedule = stored()
    assert schedule is not None and schedule.cron == "0 17 * * 5#L"
    # In the Describe it box, the cron field as the form showed it (no JavaScript): the phrase.
    alice.post("/schedules/new", form_data(name="Boxed", phrase="twice a day at 9 and 17"))
    boxed = stored("Boxed")
    assert boxed is not None and boxed.cron == "0 9,17 * * *"


def test_a_phrase_and_a_hand_edited_cron_that_disagree_are_refused(
    app: Flask, world: World
) -> None:
    alice = Panel(app, world.alice)
    response = alice.post(
        "/schedules/new", form_data(phrase="daily at noon", cron="*/5 * * * *"), htmx=False
    )
    assert response.status_code == 422
    assert "it says 0 12 * * * but the cron expression is */5 * * * *" in text(response)
    assert stored() is None


def test_editing_a_schedule_with_a_phrase_stores_the_cron(app: Flask, world: World) -> None:
    schedule = make_schedule(world.alpha, "Edited", by=world.alice, cron="0 3 * * *")
    db.session.commit()
    alice = Panel(app, world.alice)
    alice.post(
        f"/schedules/{schedule.id}/edit",
        form_data(name="Edited", cron="hourly", cron_as_shown="0 3 * * *"),
    )
    db.session.refresh(schedule)
    assert schedule.cron == "0 * * * *"
    wrong = alice.post(
        f"/schedules/{schedule.id}/edit", form_data(name="Edited", cron="every so often")
    )
    assert wrong.status_code == 422 and "did not understand “so”" in text(wrong)
    db.session.refresh(schedule)
    assert schedule.cron == "0 * * * *"
