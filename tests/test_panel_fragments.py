"""Every paged table of the panel: the rows that "Load more" fetches (a fragment) have exactly the
cells of the page's header and rows, so the columns never slip."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from flask import Flask

from tests.conftest import World, make_run, make_schedule
from tests.panel_helpers import Panel, Seeded, seed
from webapp.extensions import db


@dataclass
class Row:
    id: str
    cells: int = 0  # the columns it spans: colspan counts
    tags: list[str] = field(default_factory=list)


class TableRows(HTMLParser):
    """The rows of the outermost tables of a page or fragment (the audit log's change tables,
    nested in a cell, are not rows of the log)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # tables open
        self.open: list[tuple[int, Row]] = []
        self.rows: list[tuple[int, Row]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "table":
            self.depth += 1
        elif tag == "tr":
            self.open.append((self.depth, Row(values.get("id") or "")))
        elif tag in ("td", "th") and self.open and self.open[-1][0] == self.depth:
            row = self.open[-1][1]
            row.cells += int(values.get("colspan") or 1)
            row.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.depth -= 1
        elif tag == "tr":
            self.rows.append(self.open.pop())

    def outer(self) -> list[Row]:
        top = min(depth for depth, _ in self.rows)
        return [row for depth, row in self.rows if depth == top]


def table_rows(text: str) -> list[Row]:
    parser = TableRows()
    parser.feed(text)
    parser.close()
    return parser.outer()


def assert_fragment_matches_page(panel: Panel, url: str, more_id: str) -> None:
    page = panel.get(url).get_data(as_text=True)
    header, *rows = table_rows(page)
    assert set(header.tags) == {"th"}, url
    columns = header.cells
    assert rows[-1].id == more_id, url
    for row in rows:
        assert row.cells == columns, (url, row.id, row.cells, columns)
    link = re.search(rf'<tr id="{more_id}".*?hx-get="([^"]+)"', page, re.S)
    assert link is not None, url
    fragment = panel.get(html.unescape(link.group(1)), htmx=True).get_data(as_text=True)
    loaded = table_rows(fragment)
    assert len(loaded) > 1, url
    for row in loaded:
        # Every cell is its own <td>: a data row never pads itself with a colspan.
        assert row.cells == columns, (url, row.id, row.cells, columns)
        if row.id != more_id:
            assert len(row.tags) == columns, (url, row.id)


@pytest.fixture
def paged(world: World) -> Seeded:
    """More than a page of everything: 55 more schedules (and so 55 more audit events) and 60
    more runs of one schedule."""
    data = seed(world)
    for number in range(55):
        make_schedule(world.alpha, f"Paged {number:02d}", by=world.alice, cron="@daily")
    for minute in range(60):
        make_run(data.report, "succeeded", 200 + minute)
    db.session.commit()
    return data


def test_older_runs_have_the_columns_of_the_run_history(
    app: Flask, world: World, paged: Seeded
) -> None:
    alice = Panel(app, world.alice)
    assert_fragment_matches_page(alice, "/runs", "runs-more")
    assert_fragment_matches_page(alice, f"/runs?schedule={paged.report.id}", "runs-more")
    assert_fragment_matches_page(alice, "/runs?status=succeeded", "runs-more")


def test_older_audit_events_have_the_columns_of_the_audit_log(
    app: Flask, world: World, paged: Seeded
) -> None:
    assert_fragment_matches_page(Panel(app, world.alice), "/audit", "audit-more")


def test_more_schedules_have_the_columns_of_the_list_for_admins_and_viewers(
    app: Flask, world: World, paged: Seeded
) -> None:
    # An admin's rows have an actions column, a viewer's none: each fragment matches its page.
    assert_fragment_matches_page(Panel(app, world.alice), "/", "schedules-more")
    assert_fragment_matches_page(Panel(app, world.bob), "/", "schedules-more")
    assert_fragment_matches_page(Panel(app, world.alice), "/?q=paged", "schedules-more")
