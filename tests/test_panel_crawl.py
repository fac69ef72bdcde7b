"""Crawl every page and fragment that alice can reach, then replay each URL as charlie: not one
of them may show alpha's names, arguments, output or people."""

from __future__ import annotations

import html
import re
from collections import deque
from urllib.parse import urlsplit

from flask import Flask

from tests.conftest import World
from tests.panel_helpers import ALPHA_SECRETS, Panel, seed

LINK = re.compile(r'(?:href|hx-get)="([^"]+)"')
MAX_URLS = 400


def reachable(panel: Panel, start: str) -> set[str]:
    """Every GET URL linked from pages and fragments (href and hx-get), from `start`."""
    seen = {start}
    queue = deque([start])
    while queue and len(seen) < MAX_URLS:
        url = queue.popleft()
        for htmx in (False, True):
            response = panel.get(url, htmx=htmx)
            assert response.status_code == 200, (url, htmx, response.status_code)
            for found in LINK.findall(response.get_data(as_text=True)):
                target = html.unescape(found)
                parts = urlsplit(target)
                if parts.netloc or not target.startswith("/") or target.startswith("/static/"):
                    continue
                if target not in seen:
                    seen.add(target)
                    queue.append(target)
    return seen


def test_no_page_or_fragment_shows_alpha_data_to_charlie(app: Flask, world: World) -> None:
    data = seed(world)
    urls = reachable(Panel(app, world.alice), "/")
    # The crawl reached the pages that hold alpha's data, so the replay below means something.
    for expected in (
        f"/schedules/{data.report.id}",
        f"/schedules/{data.report.id}/edit",
        f"/runs/{data.succeeded.id}",
        f"/runs/{data.queued.id}/status",
        f"/schedules/{data.paused.id}/resume",
        "/upcoming",
        "/audit",
        "/schedules/form/params",
    ):
        assert any(url.split("?")[0] == expected for url in urls), expected
    charlie = Panel(app, world.charlie)
    for url in sorted(urls):
        for htmx in (False, True):
            response = charlie.get(url, htmx=htmx)
            assert response.status_code in (200, 404), (url, response.status_code)
            page = response.get_data(as_text=True)
            for secret in ALPHA_SECRETS:
                assert secret not in page, (url, htmx, secret)
