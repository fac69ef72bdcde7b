"""The worker's log lines: key=value by default, one JSON object per line on request."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from flask import Flask

from tests.conftest import World, make_schedule
from tests.settings_support import reconfigure
from tests.worker_support import Workers
from webapp.extensions import db
from webapp.models import Run
from webapp.scheduler import logs
from webapp.scheduler.logs import JsonFormatter, KeyValueFormatter, configure_worker_logging

CREATED = datetime(2026, 3, 8, 7, 0, 0, 250000, tzinfo=UTC).timestamp()


def record(
    action: str = "run_finished", exc_info: logging._SysExcInfoType | None = None, **extra: object
) -> logging.LogRecord:
    made = logging.makeLogRecord(
        {
            "name": "webapp.scheduler",
            "levelno": logging.WARNING,
            "levelname": "WARNING",
            "msg": action,
            "created": CREATED,
            "exc_info": exc_info,
            "action": action,
            **extra,
        }
    )
    return made


@pytest.fixture(autouse=True)
def no_process_fields() -> Iterator[None]:
    saved = dict(logs.PROCESS_FIELDS)
    logs.PROCESS_FIELDS.clear()
    yield
    logs.PROCESS_FIELDS.clear()
    logs.PROCESS_FIELDS.update(saved)


def test_a_json_line_has_the_time_level_action_and_ids() -> None:
    logs.bind_process_fields(worker_id=3)
    line = JsonFormatter().format(
        record(run_id=7, tenant_id=1, schedule_id=4, attempt=2, scheduled_for=datetime(2026, 3, 8))
    )
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-03-08T07:00:00.250Z",
        "level": "WARNING",
        "action": "run_finished",
        "logger": "webapp.scheduler",
        "worker_id": 3,
        "run_id": 7,
        "tenant_id": 1,
        "schedule_id": 4,
        "attempt": 2,
        "scheduled_for": "2026-03-08 00:00:00",  # not JSON: its text
    }


def test_a_traceback_is_a_field_not_extra_lines() -> None:
    try:
        raise RuntimeError("disk full")
    except RuntimeError:
        crashed = JsonFormatter().format(record("run_crashed", exc_info=sys.exc_info(), run_id=7))
    failed = JsonFormatter().format(record(traceback="Traceback (most recent call last):\n  ...\n"))
    assert "\n" not in crashed and "\n" not in failed
    fields = json.loads(crashed)
    assert fields["action"] == "run_crashed" and fields["run_id"] == 7
    assert fields["traceback"].startswith("Traceback (most recent call last):")
    assert fields["traceback"].endswith("RuntimeError: disk full")
    assert json.loads(failed)["traceback"] == "Traceback (most recent call last):\n  ..."


def test_the_key_value_format_is_unchanged() -> None:
    logs.bind_process_fields(worker_id=3)  # only JSON lines carry it
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(CREATED))
    line = KeyValueFormatter().format(
        record(run_id=7, error="RuntimeError: disk full", traceback="Traceback ...\n  x\n")
    )
    assert line == (
        f'{stamp} WARNING action=run_finished run_id=7 error="RuntimeError: disk full"'
        "\nTraceback ...\n  x"
    )


def test_the_setting_chooses_the_format(app: Flask) -> None:
    handlers = logging.getLogger("webapp").handlers
    saved = list(handlers)
    try:
        configure_worker_logging()
        assert isinstance(handlers[0].formatter, KeyValueFormatter)
        reconfigure(app, SCHEDULER_LOG_FORMAT="json")
        configure_worker_logging()
        assert isinstance(handlers[0].formatter, JsonFormatter)
    finally:
        handlers[:] = saved


@pytest.mark.slow
def test_a_worker_process_prints_json_lines_when_asked(
    app: Flask, world: World, workers: Workers
) -> None:
    make_schedule(world.alpha, "hello", datetime(2026, 1, 1, tzinfo=UTC))
    process = workers.start("--burst", SCHEDULER_LOG_FORMAT="json")
    assert process.wait(timeout=120) == 0, workers.logs()
    lines = [json.loads(line) for line in workers.logs().splitlines() if line.strip()]
    (run_id,) = db.session.scalars(db.select(Run.id))
    by_action = {line["action"]: line for line in lines}
    worker_id = by_action["worker_started"]["worker_id"]
    assert by_action["tick_batch"]["queued"] == 1
    assert by_action["runs_succeeded"] | {"time": None} == {
        "time": None,
        "level": "INFO",
        "action": "runs_succeeded",
        "logger": "webapp.scheduler",
        "worker_id": worker_id,
        "count": 1,
        "run_ids": [run_id],
    }
    assert all(
        line["worker_id"] == worker_id for line in lines if line["action"] != "worker_started"
    )
    # At INFO a success is an id on its batch's line: no line of the run's own (they are DEBUG).
    assert [line["action"] for line in lines if line.get("run_id") == run_id] == []


@pytest.mark.slow
def test_at_debug_a_worker_logs_each_run_leased_started_and_succeeded(
    app: Flask, world: World, workers: Workers
) -> None:
    schedule = make_schedule(world.alpha, "hello", datetime(2026, 1, 1, tzinfo=UTC))
    process = workers.start("--burst", SCHEDULER_LOG_FORMAT="json", SCHEDULER_LOG_LEVEL="DEBUG")
    assert process.wait(timeout=120) == 0, workers.logs()
    lines = [json.loads(line) for line in workers.logs().splitlines() if line.strip()]
    (run_id,) = db.session.scalars(db.select(Run.id))
    own = [line for line in lines if line.get("run_id") == run_id]
    assert [line["action"] for line in own] == ["run_leased", "run_started", "run_succeeded"]
    assert own[-1] | {"time": None, "duration_ms": None, "worker_id": None} == {
        "time": None,
        "duration_ms": None,
        "worker_id": None,
        "level": "DEBUG",
        "action": "run_succeeded",
        "message": "run_finished",
        "logger": "webapp.scheduler",
        "run_id": run_id,
        "attempt": 1,
        "tenant_id": world.alpha.id,
        "schedule_id": schedule.id,
    }
    assert [line["run_ids"] for line in lines if line["action"] == "runs_succeeded"] == [[run_id]]
    fired = [line for line in lines if line["action"] == "schedule_fired"]
    assert [line["schedule_id"] for line in fired] == [schedule.id]


def test_a_list_is_written_comma_separated() -> None:
    line = KeyValueFormatter().format(record("runs_succeeded", count=3, run_ids=[7, 8, 12]))
    assert line.endswith(" WARNING action=runs_succeeded count=3 run_ids=7,8,12")
