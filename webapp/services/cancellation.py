"""Cancelling a run: a queued one ends `cancelled` at once; a running one is asked to stop.

The panel, the API and the command line all come through here: the same refusals, the same
audit rows (`run.cancelled`, `run.stop_requested`), each in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from webapp.database import retry_lost_race, write_transaction
from webapp.extensions import db
from webapp.models import Run, Tenant
from webapp.scheduler import runs
from webapp.services import scope
from webapp.services.audit import Actor, record_event


class CancelRefused(ValueError):
    """The run cannot be cancelled (it has finished, or a stop was already asked): the reason,
    as the user sees it."""


@dataclass(frozen=True)
class Cancelled:
    run_id: int
    # cancelled: it was queued and will never start; stop_requested: it was running, and its
    # job sees the request (ctx.check_cancelled) once its worker renews the lease.
    outcome: Literal["cancelled", "stop_requested"]


@retry_lost_race
def cancel_run(run: Run, actor: Actor, now: datetime) -> Cancelled:
    """Cancels a queued run, or asks a running one to stop; CancelRefused otherwise.

    Each step is one conditional UPDATE, so a worker leasing the run at the same instant
    either took it first (then this asks it to stop) or never gets it."""
    run_id, tenant_id, job = run.id, run.tenant_id, run.job
    with write_transaction(db.session) as session:
        if runs.cancel_queued_run(session, run_id, actor.user_id, now):
            outcome: Literal["cancelled", "stop_requested"] = "cancelled"
            before = {"status": "queued"}
            after = {"status": "cancelled"}
        elif runs.request_stop(session, run_id, actor.user_id, now):
            outcome = "stop_requested"
            before = {"status": "running"}
            after = {"status": "running", "cancel_requested_at": now.isoformat()}
        else:
            session.refresh(run)
            raise CancelRefused(refusal(run))
        record_event(
            session,
            actor,
            f"run.{outcome}",
            ("run", run_id, job),
            tenant_id=tenant_id,
            before=before,
            after=after,
            at=now,
        )
    return Cancelled(run_id, outcome)


def refusal(run: Run) -> str:
    """Why this run cannot be cancelled, as it is now."""
    if run.status == "running":
        return f"run {run.id} was already asked to stop; it stops when its job next checks"
    return f"run {run.id} already {run.status}"


def find_run(tenant: Tenant, run_id: int) -> Run:
    """One of the tenant's runs (the command line's way to name one), or CancelRefused."""
    run = scope.run_of(tenant.id, run_id)
    if run is None:
        raise CancelRefused(f"tenant '{tenant.slug}' has no run {run_id}")
    return run
