"""/api/v1/calendars on both databases: CRUD with the API's conventions (the token's tenant
only, problem details by field, ETag and If-Match, Idempotency-Key), a year's closed days, the
.ics import, the audit trail and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from flask import Flask
from sqlalchemy import select

from tests.api_helpers import Api, problem_fields
from tests.conftest import World
from tests.test_calendars import ICS, counts
from webapp.api.openapi import EXAMPLE_CALENDAR
from webapp.extensions import db
from webapp.models import AuditEvent

URL = "/api/v1/calendars"


def create(api: Api, **fields: Any) -> dict[str, Any]:
    response = api.post(URL, json={**EXAMPLE_CALENDAR, **fields})
    assert response.status_code == 201, response.get_json()
    document: dict[str, Any] = response.get_json()
    return document


def test_a_calendar_is_created_read_listed_and_its_days_computed(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    created = api.post(URL, json=EXAMPLE_CALENDAR)
    assert created.status_code == 201
    document = created.get_json()
    assert created.headers["Location"] == f"{URL}/{document['id']}"
    assert document["days_off"] == [
        {"from": "2027-12-24", "to": "2027-12-31", "label": "Winter break"}
    ]
    assert document["time_zone"] == "Europe/Berlin"
    read = api.get(created.headers["Location"])
    assert read.get_json() == document and read.headers["ETag"] == created.headers["ETag"]
    listed = api.get(URL).get_json()
    assert [c["key"] for c in listed["items"]] == ["us-business"] and listed["next_cursor"] is None
    closed = api.get(f"{URL}/{document['id']}/closed-days?year=2027").get_json()
    days = {day["day"]: day["reasons"] for day in closed["days"]}
    assert days["2027-12-25"] == ["Christmas Day (US-CA holidays)", "Winter break", "Saturday"]
    assert closed["windows"] == [
        {"from": "2027-01-10T01:00:00", "to": "2027-01-10T05:00:00", "label": "DB upgrade"}
    ]


def test_bad_input_answers_problem_details_by_field(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    unknown = api.post(URL, json={**EXAMPLE_CALENDAR, "subdivision": "QQ"})
    assert unknown.status_code == 422
    assert (
        "'QQ' is not a subdivision of US; the valid ones: AK"
        in problem_fields(unknown)["subdivision"]
    )
    reversed_range = api.post(
        URL, json={**EXAMPLE_CALENDAR, "days_off": [{"from": "2027-02-02", "to": "2027-02-01"}]}
    )
    assert "before it starts" in problem_fields(reversed_range)["days_off.0"]
    create(api)
    assert "already" in problem_fields(api.post(URL, json=EXAMPLE_CALENDAR))["key"]
    assert counts() == (1, 2)


def test_a_patch_changes_the_given_fields_under_if_match(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    document = create(api)
    url = f"{URL}/{document['id']}"
    tag = api.get(url).headers["ETag"]
    changed = api.patch(url, json={"country": "DE", "subdivision": "BY"}, headers={"If-Match": tag})
    assert changed.status_code == 200
    assert (changed.get_json()["country"], changed.get_json()["days_off"]) == (
        "DE",
        document["days_off"],
    )
    stale = api.patch(url, json={"name": "Late"}, headers={"If-Match": tag})
    assert stale.status_code == 412
    assert api.get(url, headers={"If-None-Match": changed.headers["ETag"]}).status_code == 304
    assert problem_fields(api.patch(url, json={"colour": "red"})) == {"colour": "unknown field"}
    emptied = api.patch(url, json={"days_off": [], "windows": []})
    assert emptied.get_json()["days_off"] == [] and counts() == (1, 0)


def test_delete_needs_the_current_etag_when_given(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    url = f"{URL}/{create(api)['id']}"
    assert api.delete(url, headers={"If-Match": '"stale"'}).status_code == 412
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404 and counts() == (0, 0)


def test_another_tenants_calendar_is_not_found_and_a_read_token_cannot_write(
    app: Flask, world: World
) -> None:
    url = f"{URL}/{create(Api(app, world.alpha, world.alice))['id']}"
    charlie = Api(app, world.beta, world.charlie)
    assert charlie.get(url).status_code == 404
    assert charlie.patch(url, json={"name": "Mine"}).status_code == 404
    assert charlie.delete(url).status_code == 404
    assert charlie.get(URL).get_json()["items"] == []
    reader = Api(app, world.alpha, world.bob, "read")
    assert reader.get(url).status_code == 200
    assert reader.delete(url).status_code == 403
    assert reader.post(URL, json={**EXAMPLE_CALENDAR, "key": "other"}).status_code == 403
    assert counts() == (1, 2)


def test_an_ics_body_adds_events_once(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    url = f"{URL}/{create(api, days_off=[], windows=[])['id']}/ics"
    calendar_type = {"Content-Type": "text/calendar"}
    first = api.post(url, data=ICS, headers=calendar_type)
    assert first.status_code == 200 and first.get_json()["added"] == 3
    assert api.post(url, data=ICS, headers=calendar_type).get_json()["added"] == 0
    assert api.post(url, data=ICS).status_code == 415
    broken = api.post(url, data=b"BEGIN:nothing", headers=calendar_type)
    assert "not an iCalendar (.ics) file" in problem_fields(broken)["file"]
    too_big = api.post(url, data=ICS + b" " * (1024 * 1024), headers=calendar_type)
    assert too_big.status_code == 413
    assert counts() == (1, 3)


def test_every_change_is_audited_with_the_token(app: Flask, world: World) -> None:
    api = Api(app, world.alpha, world.alice)
    url = f"{URL}/{create(api)['id']}"
    api.patch(url, json={"name": "Renamed"})
    api.delete(url)
    rows = db.session.execute(
        select(AuditEvent.action, AuditEvent.actor_label)
        .where(AuditEvent.object_type == "calendar")
        .order_by(AuditEvent.id)
    ).all()
    label = f"token {api.token.prefix} (write token)"
    assert [tuple(row) for row in rows] == [
        ("calendar.created", label),
        ("calendar.updated", label),
        ("calendar.deleted", label),
    ]


def test_the_openapi_document_describes_the_calendar_endpoints(app: Flask, world: World) -> None:
    spec = app.test_client().get("/api/v1/openapi.json").get_json()
    paths = {path for path in spec["paths"] if path.startswith(URL)}
    assert paths == {
        URL,
        f"{URL}/{{calendar_id}}",
        f"{URL}/{{calendar_id}}/closed-days",
        f"{URL}/{{calendar_id}}/ics",
    }
    create_op = spec["paths"][URL]["post"]
    assert create_op["requestBody"]["content"]["application/json"]["example"] == EXAMPLE_CALENDAR
    assert "CalendarIn" in spec["components"]["schemas"]
    assert "409" in spec["paths"][f"{URL}/{{calendar_id}}"]["delete"]["responses"]
