"""Every input has a label, every button a name: on every page and fragment of the crawl, for an
admin and a viewer, and on the login, error and invalid-form pages.

A field (input other than hidden/submit/button/reset/image, select, textarea) is labelled by a
`<label for=its id>` in the same document, an enclosing `<label>`, or a non-empty aria-label or
aria-labelledby. A button's accessible name is its text (without aria-hidden parts), or its
aria-label, aria-labelledby or title; an input button's is its value. Ids are unique, so that
`for` and aria references point at one element.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from flask import Flask

from tests.conftest import World
from tests.panel_helpers import Panel, Seeded, seed
from tests.test_panel_crawl import reachable

FIELDS = ("input", "select", "textarea")
UNLABELLED_INPUTS = ("hidden", "submit", "button", "reset", "image")
VOID = (
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
)


@dataclass
class Control:
    tag: str
    attrs: dict[str, str]
    in_label: bool
    text: list[str] = field(default_factory=list)

    def describe(self) -> str:
        shown = " ".join(f'{k}="{v}"' for k, v in self.attrs.items())
        return f"<{self.tag} {shown}>"


class ControlParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.controls: list[Control] = []
        self.label_for: set[str] = set()
        self.ids: list[str] = []
        self.label_depth = 0
        self.hidden_depth = 0  # inside aria-hidden="true"
        self.stack: list[str] = []
        self.button: Control | None = None
        self.button_depth = 0

    def handle_starttag(self, tag: str, attr_list: list[tuple[str, str | None]]) -> None:
        attrs = {name: value or "" for name, value in attr_list}
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "label":
            self.label_depth += 1
            if attrs.get("for"):
                self.label_for.add(attrs["for"])
        if tag in FIELDS or tag == "button":
            control = Control(tag, attrs, self.label_depth > 0)
            self.controls.append(control)
            if tag == "button":
                self.button, self.button_depth = control, len(self.stack)
        if tag in VOID:
            return
        self.stack.append(tag)
        if attrs.get("aria-hidden") == "true" or self.hidden_depth:
            self.hidden_depth += 1

    def handle_startendtag(self, tag: str, attr_list: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attr_list)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID or tag not in self.stack:
            return
        while self.stack:
            closed = self.stack.pop()
            if self.hidden_depth:
                self.hidden_depth -= 1
            if closed == "label":
                self.label_depth -= 1
            if closed == "button" and len(self.stack) == self.button_depth:
                self.button = None
            if closed == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.button is not None and not self.hidden_depth:
            self.button.text.append(data)


def problems(page: str) -> list[str]:
    parser = ControlParser()
    parser.feed(page)
    parser.close()
    found = [f"duplicate id {i!r}" for i in sorted(set(parser.ids)) if parser.ids.count(i) > 1]
    found += [f"label for missing id {i!r}" for i in sorted(parser.label_for - set(parser.ids))]
    for control in parser.controls:
        attrs = control.attrs
        aria = attrs.get("aria-label", "").strip() or attrs.get("aria-labelledby", "").strip()
        kind = attrs.get("type", "text").lower()
        if control.tag == "button" or (control.tag == "input" and kind in UNLABELLED_INPUTS):
            if kind == "hidden":
                continue
            if control.tag == "button":
                name = "".join(control.text).strip() or attrs.get("title", "").strip()
            else:
                name = attrs.get("value", "").strip() or attrs.get("alt", "").strip()
            if not (name or aria):
                found.append(f"button without an accessible name: {control.describe()}")
            continue
        labelled = control.in_label or attrs.get("id", "") in parser.label_for
        if not (labelled or aria):
            found.append(f"field without a label: {control.describe()}")
    return found


def test_the_checker_finds_what_it_should() -> None:
    labelled = '<label for="a">A</label><input id="a"><label>B <select></select></label>'
    assert problems(labelled) == []
    assert problems('<input id="b" aria-label="Search"><button>Go</button>') == []
    assert problems('<button title="Close"><span aria-hidden="true">&times;</span></button>') == []
    assert problems('<input type="hidden" name="x"><input type="submit" value="Send">') == []
    assert problems('<input id="c" name="c">')[0].startswith("field without a label")
    assert problems("<textarea></textarea>")[0].startswith("field without a label")
    assert problems('<button name="x"><span aria-hidden="true">&times;</span></button>') == [
        'button without an accessible name: <button name="x">'
    ]
    assert problems('<input type="submit" value="">')[0].startswith("button without")
    assert problems('<label for="x">X</label><input id="y">') == [
        "label for missing id 'x'",
        'field without a label: <input id="y">',
    ]
    assert problems('<p id="d"></p><p id="d"></p>') == ["duplicate id 'd'"]


@pytest.fixture
def data(world: World) -> Seeded:
    return seed(world)


def check(panel: Panel, url: str, htmx: bool, statuses: tuple[int, ...] = (200,)) -> None:
    response = panel.get(url, htmx=htmx)
    assert response.status_code in statuses, (url, htmx, response.status_code)
    assert problems(response.get_data(as_text=True)) == [], (url, htmx)


def test_every_page_of_the_crawl_labels_its_fields_and_names_its_buttons(
    app: Flask, world: World, data: Seeded
) -> None:
    from webapp.services.accounts import add_user

    add_user("alice@example.com", "beta", "viewer", None)  # so that the tenant switcher shows
    for user in (world.alice, world.bob):
        panel = Panel(app, user)
        urls = reachable(panel, "/")
        if user is world.alice:
            urls |= {"/schedules/new", f"/schedules/{data.paused.id}/resume"}
        assert f"/schedules/{data.report.id}" in urls
        for url in sorted(urls):
            for htmx in (False, True):
                check(panel, url, htmx, (200, 403))


def test_login_error_and_invalid_form_pages_label_their_fields(
    app: Flask, world: World, data: Seeded
) -> None:
    anonymous = app.test_client()
    page = anonymous.get("/login").get_data(as_text=True)
    assert problems(page) == []
    alice = Panel(app, world.alice)
    check(alice, "/schedules/999999", False, (404,))
    check(alice, "/runs?before=x", False, (400,))
    check(Panel(app, world.bob), "/schedules/new", False, (403,))
    invalid = alice.post(
        "/schedules/new", {"name": "", "job": "demo.sleep", "cron": "nope", "time_zone": "Mars/X"}
    )
    assert invalid.status_code == 422
    assert problems(invalid.get_data(as_text=True)) == []
