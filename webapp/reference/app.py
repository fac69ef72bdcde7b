"""The app the reference pages read (its commands' context, its routes' OpenAPI document):
built once, from the defaults alone, never from a checkout's instance folder."""

from __future__ import annotations

import functools
import os
import tempfile

from flask import Flask

INSTANCE_VARIABLE = "SCHEDULER_INSTANCE_PATH"


@functools.cache
def reference_app() -> Flask:
    from webapp import create_app

    before = os.environ.get(INSTANCE_VARIABLE)
    with tempfile.TemporaryDirectory() as instance:
        os.environ[INSTANCE_VARIABLE] = instance
        try:
            return create_app({"TESTING": True, "DATABASE_URL": "sqlite://"})
        finally:
            if before is None:
                del os.environ[INSTANCE_VARIABLE]
            else:
                os.environ[INSTANCE_VARIABLE] = before
