"""Turning two-factor login on through the panel, as a user does, for the two-factor tests."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import pyotp

from tests.panel_helpers import Panel


@dataclass(frozen=True)
class Enrolled:
    secret: str
    recovery_codes: list[str]

    def code(self, steps_ahead: int = 1) -> str:
        """A code the server takes: by default the next step's, since enrolment used this one."""
        return pyotp.TOTP(self.secret).at(int(time.time()), counter_offset=steps_ahead)


def enrol(panel: Panel) -> Enrolled:
    setup = panel.post("/account/two-factor/setup", htmx=False)
    assert setup.status_code == 200
    text = setup.get_data(as_text=True)
    assert 'src="data:image/svg+xml' in text
    found = re.search(r'id="totp-secret">([A-Z2-7]+)<', text)
    assert found
    secret = found.group(1)
    done = panel.post("/account/two-factor/confirm", {"code": pyotp.TOTP(secret).now()}, htmx=False)
    assert done.status_code == 200, done.get_data(as_text=True)
    codes = re.findall(r"<li><code>([a-z2-7-]+)</code></li>", done.get_data(as_text=True))
    assert len(codes) == 10
    return Enrolled(secret, codes)
