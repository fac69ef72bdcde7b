"""A job module that imports in the worker but fails in a fresh job process (`--pool process`),
as a module does that needs something only the worker's environment has."""

from __future__ import annotations

import multiprocessing

from webapp.catalog import Catalog

if multiprocessing.parent_process() is not None:
    raise ImportError("this module cannot be imported in a job process")

catalog = Catalog()
