"""The job catalog: the allowlist of jobs that schedules may name (see registry.py)."""

from __future__ import annotations

from collections.abc import Iterable

from webapp.catalog.builtin import register_builtin_jobs
from webapp.catalog.context import (
    JobContext,
    JobLogger,
    JobTimeout,
    PermanentError,
    RunCancelled,
)
from webapp.catalog.registry import (
    ArgsError,
    Catalog,
    CatalogError,
    DefaultSchedule,
    FormField,
    JobSpec,
    UnknownJobError,
    args_path,
    load_job_modules,
    size_errors,
)
from webapp.catalog.ssrf import WebhookError, check_webhook_target

__all__ = [
    "ArgsError",
    "Catalog",
    "CatalogError",
    "DefaultSchedule",
    "FormField",
    "JobContext",
    "JobLogger",
    "JobSpec",
    "JobTimeout",
    "PermanentError",
    "RunCancelled",
    "UnknownJobError",
    "WebhookError",
    "args_path",
    "build_catalog",
    "check_webhook_target",
    "load_job_modules",
    "register_builtin_jobs",
    "size_errors",
]


def build_catalog(demo_jobs: bool, modules: Iterable[str] = ()) -> Catalog:
    """A new catalog with the bundled jobs and those of the operator's job modules."""
    catalog = Catalog()
    register_builtin_jobs(catalog, demo=demo_jobs)
    load_job_modules(catalog, modules)
    return catalog
