"""Jitter: each scheduled run starts a little after its fire time, spread per fire, so that a
herd of schedules due at the same minute does not reach the workers in the same second.

The spread is a hash of (schedule id, fire time), not a random draw: a retry of the tick, or a
second worker racing for the same fire, computes the same instant. The fire time itself
(`scheduled_for`, the exactly-once key) never moves; only `available_at` does. Pure: nothing
here reads the clock or the database.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache

from webapp import cron

# The most a run may wait for its turn, whatever the schedule's cadence.
MAX_JITTER = 3600
# Fires looked at to find a schedule's shortest gap (the tenant's minimum interval uses the same).
GAP_SAMPLE = 500
# Fire times are whole minutes apart, so a jitter of half a minute never needs the cron's gaps.
ALWAYS_ALLOWED = 30


def jitter_limit(spec: cron.CronSpec, now: datetime) -> int:
    """The largest jitter the schedule may have: half its shortest interval between fires
    (a run never starts after the next fire time), and MAX_JITTER at most."""
    gap = spec.shortest_gap(now, GAP_SAMPLE)
    if gap is None:
        return MAX_JITTER
    return min(MAX_JITTER, int(gap.total_seconds()) // 2)


def jitter_rule(limit: int) -> str:
    """The rule in words, for the error next to the field, the API's problem and the CLI."""
    if limit >= MAX_JITTER:
        return f"must be 0 to {MAX_JITTER} s"
    return (
        f"must be 0 to {limit} s for this schedule: at most half its shortest interval "
        f"between fires, and {MAX_JITTER} s at most"
    )


@lru_cache(maxsize=4096)
def limit_on(expression: str, time_zone: str, day: date) -> int:
    """jitter_limit measured from the start of `day` (UTC), cached: the tick asks it of every
    claimed schedule, and a herd shares a few expressions. Measuring from the day rather than
    the instant keeps the answer the same for every worker and retry within the day."""
    spec = cron.validate(expression, time_zone)
    return jitter_limit(spec, datetime.combine(day, time(), UTC))


def effective_jitter(
    own: int | None, tenant_default: int | None, expression: str, time_zone: str, now: datetime
) -> int:
    """The schedule's own jitter, else its tenant's default, else none; capped to the schedule's
    bound (a tenant default larger than a frequent schedule allows is shortened, not refused)."""
    seconds = own if own is not None else tenant_default or 0
    if seconds <= ALWAYS_ALLOWED:
        return max(seconds, 0)
    return min(seconds, limit_on(expression, time_zone, now.date()))


def jitter_offset(schedule_id: int, fire: datetime, jitter: int) -> int:
    """Whole seconds in [0, jitter], the same for a given schedule and fire time everywhere
    (blake2b: Python's hash() differs between processes)."""
    if jitter <= 0:
        return 0
    key = f"{schedule_id}:{fire.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}".encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter + 1)


def available_at(
    schedule_id: int, fire: datetime, jitter: int, now: datetime, start: datetime | None = None
) -> datetime:
    """When the run of this fire may start: its fire time (or the `start` its calendar moved it
    to) plus its offset, or now when that has passed already (a late tick, a catch-up run, a
    fire moved to an earlier day: waiting longer would only add lag)."""
    offset = timedelta(seconds=jitter_offset(schedule_id, fire, jitter))
    return max(now, (start or fire) + offset)
