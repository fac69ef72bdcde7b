"""The bundled jobs' reference: each job of the catalog with its parameters and execution
settings, and the default schedules it brings, from the catalog's registry."""

from __future__ import annotations

import json

from webapp.catalog import build_catalog
from webapp.catalog.registry import FormField, JobSpec
from webapp.config import DEFAULTS
from webapp.reference.text import cell, code, prose, table


def bundled_jobs() -> list[JobSpec]:
    """The jobs every installation has, then those of SCHEDULER_DEMO_JOBS, by name."""
    return sorted(build_catalog(demo_jobs=True).jobs(), key=lambda job: job.name)


def demo_names() -> set[str]:
    everyday = {job.name for job in build_catalog(demo_jobs=False).jobs()}
    return {job.name for job in bundled_jobs()} - everyday


def takes(field: FormField) -> str:
    words = {"text": "text", "number": "number", "integer": "integer", "checkbox": "yes or no"}
    if field.kind == "select":
        return " or ".join(code(choice) for choice in field.choices)
    shown = words[field.kind]
    if field.min is not None and field.max is not None:
        shown += f", {field.min:g} to {field.max:g}"
    elif field.min is not None:
        shown += f", at least {field.min:g}"
    if field.max_length is not None:
        shown += f", at most {field.max_length} characters"
    if field.max_bytes is not None:
        shown += f", at most {field.max_bytes:,} bytes"
    return shown


def render_job(job: JobSpec, demo: bool) -> str:
    fields = job.form_fields(DEFAULTS.job_settings())
    facts = (
        f"Scope: {job.scope}. Attempts: {job.max_attempts}"
        + (f" ({job.retry_backoff:g} s before a retry, doubling)" if job.max_attempts > 1 else "")
        + f". Timeout: {job.timeout:g} s."
        + (" Registered only with `SCHEDULER_DEMO_JOBS` on." if demo else "")
    )
    parts = [f"### `{job.name}`: {job.title}", prose(job.description), facts]
    if fields:
        rows = [
            (
                code(field.name),
                takes(field),
                "**required**" if field.required else code(json.dumps(field.default)),
                cell(field.help),
            )
            for field in fields
        ]
        parts.append(table(("Parameter", "Takes", "Default", "Meaning"), rows))
    else:
        parts.append("No parameters.")
    return "\n\n".join(parts)


def render_defaults() -> str:
    rows = [
        (
            code(default.key),
            code(default.job),
            code(default.cron),
            default.time_zone or "the tenant's",
            default.scope,
        )
        for default in build_catalog(demo_jobs=True).defaults()
    ]
    return table(("Key", "Job", "Cron", "Time zone", "Scope"), rows)


def render() -> str:
    demo = demo_names()
    jobs = "\n\n".join(render_job(job, job.name in demo) for job in bundled_jobs())
    return f"## Jobs\n\n{jobs}\n\n## Default schedules\n\n{render_defaults()}\n"
