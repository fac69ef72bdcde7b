"""Structured logs for the worker: one line per event, `action=...` first, then its fields, or
one JSON object per line (SCHEDULER_LOG_FORMAT=json)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from flask import has_app_context

from webapp.config import settings

STANDARD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# An extra field printed on the lines after the event, as an exception would be: a failed run's
# full traceback (for operators; tenants see only its type, message and their job's frames).
TRACEBACK = "traceback"


class KeyValueFormatter(logging.Formatter):
    """`2026-03-08T07:00:00 INFO action=tick_batch claimed=300 queued=300 skipped=0 ...`."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in STANDARD_ATTRIBUTES}
        action = fields.pop("action", None) or record.getMessage()
        trace = fields.pop(TRACEBACK, None)
        pairs = " ".join(f"{key}={quote(value)}" for key, value in fields.items())
        line = f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')} {record.levelname} action={action}"
        line = f"{line} {pairs}" if pairs else line
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        if trace:
            line = f"{line}\n{str(trace).rstrip()}"
        return line


def quote(value: object) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return f'"{text}"' if not text or " " in text or '"' in text or "=" in text else text


# Fields every JSON line of this process carries (the worker's id, once it has registered);
# the key=value lines stay as they were.
PROCESS_FIELDS: dict[str, object] = {}


def bind_process_fields(**fields: object) -> None:
    PROCESS_FIELDS.update(fields)


class JsonFormatter(logging.Formatter):
    """`{"time": "2026-03-08T07:00:00.123Z", "level": "INFO", "action": "tick_batch",
    "queued": 300, ...}`: one object per line, a traceback as a field, never extra lines."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in STANDARD_ATTRIBUTES}
        moment = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, object] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "action": fields.pop("action", None) or record.getMessage(),
        }
        if record.getMessage() != line["action"]:
            line["message"] = record.getMessage()
        line["logger"] = record.name
        traces = [str(fields.pop(TRACEBACK)).rstrip()] if fields.get(TRACEBACK) else []
        fields.pop(TRACEBACK, None)
        if record.exc_info:
            traces.insert(0, self.formatException(record.exc_info))
        line.update({k: v for k, v in PROCESS_FIELDS.items() if k not in fields})
        line.update(fields)
        if traces:
            line[TRACEBACK] = "\n".join(traces)
        # Whatever JSON cannot hold (a datetime, an exception) is written as its text.
        return json.dumps(line, default=str, ensure_ascii=False)


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "keyvalue": KeyValueFormatter,
    "json": JsonFormatter,
}


def configure_worker_logging(log_format: str | None = None, level: str | None = None) -> None:
    """Sends the `webapp` loggers to stderr in `log_format` from `level` up; by default
    SCHEDULER_LOG_FORMAT's and SCHEDULER_LOG_LEVEL's (the settings validate them), key=value
    and INFO outside an app."""
    if log_format is None:
        log_format = settings().SCHEDULER_LOG_FORMAT if has_app_context() else "keyvalue"
    if level is None:
        level = settings().SCHEDULER_LOG_LEVEL if has_app_context() else "INFO"
    handler = logging.StreamHandler()
    handler.setFormatter(FORMATTERS[log_format]())
    root = logging.getLogger("webapp")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
