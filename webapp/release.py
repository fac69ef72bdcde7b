"""Which release this is: the distribution's name on the package index and its version.

The import package is `webapp`; the distribution is `tenantcron` (pyproject.toml), so that
`pip install 'tenantcron[celery]'` names it and `pip install '.[celery]'` installs a checkout."""

from __future__ import annotations

import importlib.metadata

DISTRIBUTION = "tenantcron"


def version() -> str:
    """The installed release (pyproject.toml's version), shown on the workers page and by
    `/healthz`; "unknown" for a checkout run without installing it."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
