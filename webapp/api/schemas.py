"""The API's documents as pydantic models: what the views answer and what the OpenAPI
document describes, from the same classes. A schedule's input is `ScheduleIn` itself (the one
validation of a schedule); these add the output shapes, the small action bodies and the query
strings."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from webapp import cron
from webapp.catalog import JobSpec
from webapp.models import (
    CalendarPolicy,
    MisfirePolicy,
    OverlapPolicy,
    Run,
    RunStatus,
    Schedule,
    Trigger,
)
from webapp.services.backfill import BackfillPlan
from webapp.services.schedules import PreviewFire

MAX_ID = 2_147_483_647  # ids are PostgreSQL `integer`s
MAX_PAGE = 200
MAX_FIRES = 100
MAX_TEXT_FILTER = 200


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- Output ---------------------------------------------------------------------------------


class ScheduleOut(BaseModel):
    """A schedule. Times are RFC 3339 in UTC; `time_zone` is the zone its cron runs in."""

    id: int
    key: str
    name: str
    job: str
    args: dict[str, Any]
    cron: str
    description: str = Field(description="The cron expression in words")
    time_zone: str
    active: bool
    inactive_reason: str | None = Field(description="Why the scheduler paused it, if it did")
    misfire_policy: MisfirePolicy
    overlap_policy: OverlapPolicy
    notify_emails: list[str] = Field(description="Told of failures; empty: the tenant's defaults")
    notify_webhook_url: str | None = Field(description="Gets the same events as signed JSON")
    pause_after_failures: int | None = Field(
        description="Pauses itself after this many failed runs in a row; null: never"
    )
    jitter_seconds: int | None = Field(
        description="Each run starts up to this many seconds after its fire time (a fixed "
        "spread per fire); null: the tenant's default"
    )
    calendar: str | None = Field(
        description="The key of the tenant's business calendar its fires follow; null: none"
    )
    calendar_policy: CalendarPolicy = Field(
        description="A fire at a time the calendar closes: skip (recorded as a skipped run with "
        "the reason), or run at the same local time on the next or previous business day (out "
        "of a maintenance window: at its end)"
    )
    next_run_at: datetime | None
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    warnings: dict[str, str] = Field(
        default_factory=dict,
        description="In the answer of a create or an edit, by field: what was accepted but may "
        "not be meant (a name another schedule has, a legacy fixed-offset zone such as EST); "
        "empty otherwise",
    )

    @classmethod
    def of(cls, schedule: Schedule, warnings: dict[str, str] | None = None) -> ScheduleOut:
        try:
            description = cron.describe(cron.validate(schedule.cron, schedule.time_zone))
        except cron.CronError as error:
            description = f"not a valid expression: {error}"
        return cls(
            id=schedule.id,
            key=schedule.key,
            name=schedule.name,
            job=schedule.job,
            args=schedule.args,
            cron=schedule.cron,
            description=description,
            time_zone=schedule.time_zone,
            active=schedule.active,
            inactive_reason=schedule.inactive_reason,
            misfire_policy=schedule.misfire_policy,
            overlap_policy=schedule.overlap_policy,
            notify_emails=list(schedule.notify_emails or ()),
            notify_webhook_url=schedule.notify_webhook_url,
            pause_after_failures=schedule.pause_after_failures,
            jitter_seconds=schedule.jitter_seconds,
            calendar=schedule.calendar,
            calendar_policy=schedule.calendar_policy,
            next_run_at=schedule.next_run_at,
            last_run_at=schedule.last_run_at,
            created_at=schedule.created_at,
            updated_at=schedule.updated_at,
            warnings=warnings or {},
        )


class SchedulePage(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null: last")


class RunOut(BaseModel):
    """A run. Times are RFC 3339 in UTC; `time_zone` is its schedule's zone (the tenant's once
    the schedule is deleted)."""

    id: int
    schedule_id: int | None = Field(description="Null once its schedule is deleted")
    job: str
    args: dict[str, Any]
    trigger: Trigger
    status: RunStatus
    attempt: int
    max_attempts: int
    fires_covered: int
    scheduled_for: datetime
    queued_at: datetime
    available_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    time_zone: str = Field(
        description="The zone of the run's schedule, the one its fire times follow (the "
        "tenant's once the schedule is deleted)"
    )

    @classmethod
    def fields_of(cls, run: Run, time_zone: str) -> dict[str, Any]:
        return {
            "id": run.id,
            "schedule_id": run.schedule_id,
            "job": run.job,
            "args": run.args,
            "trigger": run.trigger,
            "status": run.status,
            "attempt": run.attempt,
            "max_attempts": run.max_attempts,
            "fires_covered": run.fires_covered,
            "scheduled_for": run.scheduled_for,
            "queued_at": run.queued_at,
            "available_at": run.available_at,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "error": run.error,
            "time_zone": time_zone,
        }

    @classmethod
    def of(cls, run: Run, time_zone: str) -> RunOut:
        return cls(**cls.fields_of(run, time_zone))


class RunDetail(RunOut):
    output: str | None = Field(description="What the job printed (capped)")
    cancel_requested_at: datetime | None = Field(
        None, description="When someone asked the running run to stop (POST .../cancel)"
    )
    cancelled_at: datetime | None = Field(None, description="When the run ended cancelled")

    @classmethod
    def of(cls, run: Run, time_zone: str) -> RunDetail:
        return cls(
            **cls.fields_of(run, time_zone),
            output=run.output,
            cancel_requested_at=run.cancel_requested_at,
            cancelled_at=run.cancelled_at,
        )


class CancelOut(BaseModel):
    """What a cancel did: `cancelled` (it was queued: it never starts) or `stop_requested` (it
    was running: the job sees the request within a lease renewal, if it checks)."""

    outcome: Literal["cancelled", "stop_requested"]
    run: RunDetail


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for older runs; null: last")


class FireOut(BaseModel):
    at: datetime = Field(description="UTC")
    local: datetime = Field(description="The same instant in the schedule's zone, with offset")
    note: str | None = Field(description="How a daylight-saving change moved it, if it did")


class PreviewFireOut(FireOut):
    """A fire of a preview: with what a business calendar does to it."""

    calendar: Literal["skipped", "moved"] | None = Field(
        default=None,
        description="What the schedule's business calendar does to it: skipped (recorded as a "
        "skipped run) or moved to `moved_to`; null: it runs at its fire time",
    )
    reason: str | None = Field(
        default=None,
        description='Why the calendar skips or moves it: "Christmas Day (US holidays)"',
    )
    moved_to: datetime | None = Field(
        default=None, description="Where a moved fire runs, in the schedule's zone, with offset"
    )

    @classmethod
    def of(cls, fire: PreviewFire, zone: ZoneInfo) -> PreviewFireOut:
        mark = fire.mark
        return cls(
            at=fire.at,
            local=fire.at.astimezone(zone),
            note=fire.note,
            calendar=mark.kind if mark else None,
            reason=mark.reason if mark else None,
            moved_to=mark.moved_to.astimezone(zone) if mark and mark.moved_to else None,
        )


class FiresOut(BaseModel):
    time_zone: str
    description: str
    fires: list[PreviewFireOut]

    @classmethod
    def of(cls, description: str, fires: list[PreviewFire], time_zone: str) -> FiresOut:
        zone = ZoneInfo(time_zone)
        return cls(
            time_zone=time_zone,
            description=description,
            fires=[PreviewFireOut.of(fire, zone) for fire in fires],
        )


class ParseOut(BaseModel):
    text: str = Field(description="As sent")
    cron: str = Field(description="The five-field cron expression it means")
    description: str = Field(description="The cron expression in words, as the panel shows it")


class BackfillOut(BaseModel):
    """A backfill's preview (`dry_run`) or result: the fire times of the window, in UTC and in
    the schedule's zone."""

    schedule_id: int
    time_zone: str = Field(description="The schedule's zone, the one the fire times follow")
    window_from: datetime = Field(alias="from", description="UTC; included")
    window_to: datetime = Field(alias="to", description="UTC; included")
    count: int = Field(description="Fire times in the window")
    first: FireOut | None = Field(description="The first fire time; null when there is none")
    last: FireOut | None = Field(description="The last fire time; null when there is none")
    already_recorded: int = Field(
        description="Of those, fire times that already had a run when previewed: skipped"
    )
    paused: bool = Field(description="The schedule is paused: the runs will still run")
    max_runs: int = Field(description="The most runs one backfill may queue")
    dry_run: bool
    queued: int | None = Field(description="Runs queued; null for a dry run")
    skipped: int | None = Field(
        description="Fire times skipped because they already had a run; null for a dry run"
    )

    model_config = ConfigDict(populate_by_name=True)

    @classmethod
    def of(
        cls,
        plan: BackfillPlan,
        max_runs: int,
        queued: int | None = None,
        skipped: int | None = None,
    ) -> BackfillOut:
        zone = ZoneInfo(plan.time_zone)

        def fire(at: datetime | None) -> FireOut | None:
            if at is None:
                return None
            return FireOut(at=at, local=at.astimezone(zone), note=plan.spec.dst_note(at))

        window = {"from": plan.window.start, "to": plan.window.end}  # by alias: Python keywords
        return cls(
            **window,
            schedule_id=plan.schedule_id,
            time_zone=plan.time_zone,
            count=plan.count,
            first=fire(plan.first),
            last=fire(plan.last),
            already_recorded=plan.existing,
            paused=plan.paused,
            max_runs=max_runs,
            dry_run=queued is None,
            queued=queued,
            skipped=skipped,
        )


class JobOut(BaseModel):
    name: str
    title: str
    description: str
    params_schema: dict[str, Any] = Field(description="JSON Schema of the job's `args`")
    max_attempts: int
    timeout: float = Field(description="Seconds a run may take")

    @classmethod
    def of(cls, spec: JobSpec) -> JobOut:
        return cls(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            params_schema=spec.params.model_json_schema(),
            max_attempts=spec.max_attempts,
            timeout=spec.timeout,
        )


class CatalogOut(BaseModel):
    jobs: list[JobOut]


class FieldProblem(BaseModel):
    field: str = Field(description="The field at fault: `cron`, `args.url`, `limit`")
    message: str


class ProblemOut(BaseModel):
    """RFC 9457 problem details (`application/problem+json`)."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldProblem] = Field(default_factory=list)
    examples: list[str] | None = Field(
        None, description="A phrase not understood (`/api/v1/cron/parse`): three that are"
    )


# --- Input ----------------------------------------------------------------------------------


class SchedulePatch(Strict):
    """Only the fields to change; the result is checked as a whole, as a new schedule is."""

    key: StrictStr | None = None
    name: StrictStr | None = None
    job: StrictStr | None = None
    args: dict[str, Any] | None = None
    time_zone: StrictStr | None = None
    cron: StrictStr | None = None
    misfire_policy: MisfirePolicy | None = None
    overlap_policy: OverlapPolicy | None = None
    active: bool | None = None
    notify_emails: list[StrictStr] | None = None
    notify_webhook_url: StrictStr | None = None
    pause_after_failures: int | None = None
    jitter_seconds: int | None = None
    calendar: StrictStr | None = None
    calendar_policy: CalendarPolicy | None = None


class ResumeIn(Strict):
    missed: Literal["skip", "catch_up"] = Field(
        "skip", description="Fire times missed while paused: skip them, or catch up on them"
    )


class RunNowIn(Strict):
    at: datetime | None = Field(
        None,
        description="When the run may start: ISO 8601 with an offset, or without one as a "
        "wall-clock time in the schedule's zone; not in the past and at most a year (366 days) "
        "ahead; default: now",
    )


class BackfillIn(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    window_from: StrictStr = Field(
        alias="from",
        max_length=64,
        description="ISO 8601; without an offset, a wall-clock time in the schedule's zone",
    )
    window_to: StrictStr = Field(
        alias="to", max_length=64, description="The same; not in the future. Both ends included"
    )
    dry_run: bool = Field(False, description="Answer the preview; queue nothing")


PAGE_SIZE = "How many to answer at most"
CURSOR = "Where the page starts: the previous page's `next_cursor`; absent: the first page"


class PageQuery(Strict):
    """A page of a list by id: its size and where it starts (the previous page's cursor)."""

    limit: int = Field(50, ge=1, le=MAX_PAGE, description=PAGE_SIZE)
    cursor: str | None = Field(None, max_length=20, description=CURSOR)


class ScheduleQuery(Strict):
    status: Literal["active", "paused"] | None = Field(None, description="Only these schedules")
    job: str | None = Field(None, max_length=MAX_TEXT_FILTER, description="Only this job's")
    q: str | None = Field(None, max_length=MAX_TEXT_FILTER, description="Part of the name")
    limit: int = Field(50, ge=1, le=MAX_PAGE, description=PAGE_SIZE)
    cursor: str | None = Field(None, max_length=20, description=CURSOR)


Day = Annotated[date, Field(ge=cron.FIRST_DAY, le=cron.LAST_DAY)]


class RunQuery(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    status: RunStatus | None = Field(None, description="Only runs in this state")
    trigger: Trigger | None = Field(None, description="Only runs started this way")
    schedule_id: int | None = Field(None, ge=1, le=MAX_ID, description="Only this schedule's")
    since: Day | None = Field(
        None, alias="from", description="First local day (the tenant's zone), YYYY-MM-DD"
    )
    until: Day | None = Field(None, alias="to", description="Last local day, YYYY-MM-DD")
    limit: int = Field(50, ge=1, le=MAX_PAGE, description=PAGE_SIZE)
    cursor: str | None = Field(None, max_length=20, description=CURSOR)


FIRE_COUNT = "How many fire times"


class FiresQuery(Strict):
    count: int = Field(5, ge=1, le=MAX_FIRES, description=FIRE_COUNT)


class ParseQuery(Strict):
    text: str = Field(
        max_length=cron.MAX_PHRASE_LENGTH,
        description="A schedule in plain English, e.g. `every weekday at 9:30` (cron passes "
        "through)",
    )


class PreviewQuery(Strict):
    expression: str = Field(
        max_length=cron.MAX_EXPRESSION_LENGTH, description="A cron expression, or a phrase"
    )
    time_zone: str = Field("UTC", max_length=64, description="The IANA zone it is read in")
    count: int = Field(5, ge=1, le=MAX_FIRES, description=FIRE_COUNT)
    calendar: str | None = Field(
        None, max_length=64, description="A business calendar's key: its skipped and moved fires"
    )
    calendar_policy: Literal["skip", "next_business_day", "previous_business_day"] = Field(
        "skip", description="What the calendar does to a fire on a closed day"
    )
