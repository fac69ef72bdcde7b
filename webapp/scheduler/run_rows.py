"""The rows of new runs, before runs.insert_runs writes them: a fire's (the tick, a backfill), a
Run now's, and the overlap policy that may record either as skipped. Pure."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from webapp.scheduler.jitter import available_at
from webapp.scheduler.misfire import PlannedRun

# Why a fire or a Run now was recorded as skipped under the overlap policy `skip`.
OVERLAP_REASON = "skipped: an earlier run of this schedule is still queued or running"


def apply_overlap(
    planned: Iterable[PlannedRun], overlap_policy: str, running: bool
) -> list[tuple[PlannedRun, str | None]]:
    """The fires' runs under the schedule's overlap policy, each with its reason: with `skip`,
    a queued run while an earlier one is unfinished (`running`, or queued before it here) is
    recorded as skipped instead."""
    runs: list[tuple[PlannedRun, str | None]] = []
    for run in planned:
        reason = run.reason
        if run.status == "queued" and overlap_policy == "skip":
            if running:
                run, reason = replace(run, status="skipped"), OVERLAP_REASON
            running = True
        runs.append((run, reason))
    return runs


def fire_key(schedule_id: int, fire: datetime) -> str:
    """The idempotency key of a scheduled fire: the same for every attempt of that run."""
    return f"schedule:{schedule_id}:{fire.isoformat(timespec='seconds')[:19]}Z"  # not strftime: 2x


def run_row(
    schedule: Any,  # a claimed row (tick), or the model (backfill)
    planned: PlannedRun,
    now: datetime,
    max_attempts: int,
    reason: str | None,
    jitter: int = 0,
) -> dict[str, Any]:
    """The run of one planned fire; a queued one may start `jitter`'s share after its fire."""
    finished = planned.status != "queued"
    fire = planned.scheduled_for
    start = now if finished else available_at(schedule.id, fire, jitter, now, planned.starts_at)
    return {
        "tenant_id": schedule.tenant_id,
        "schedule_id": schedule.id,
        "job": schedule.job,
        "args": schedule.args,
        "trigger": planned.trigger,
        "scheduled_for": planned.scheduled_for,
        "idempotency_key": fire_key(schedule.id, planned.scheduled_for),
        "status": planned.status,
        "attempt": 0,
        "max_attempts": max_attempts,
        "fires_covered": planned.fires_covered,
        "queued_at": now,
        "available_at": start,
        "finished_at": now if finished else None,
        "error": reason,
    }


def manual_run_row(
    schedule: Any,
    start: datetime,
    now: datetime,
    max_attempts: int,
    requested_by: int | None,
    skipped: bool = False,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """A Run now's run, queued at `now` to start at `start`; `skipped`: recorded as skipped
    at once (the overlap policy `skip` while an earlier run is unfinished)."""
    return {
        "tenant_id": schedule.tenant_id,
        "schedule_id": schedule.id,
        "job": schedule.job,
        "args": schedule.args,
        "trigger": "manual",
        "scheduled_for": start,
        "idempotency_key": idempotency_key or f"manual:{uuid.uuid4()}",
        "status": "skipped" if skipped else "queued",
        "attempt": 0,
        "max_attempts": max_attempts,
        "fires_covered": 1,
        "queued_at": now,
        "available_at": start,
        "finished_at": now if skipped else None,
        "error": OVERLAP_REASON if skipped else None,
        "requested_by": requested_by,
    }
