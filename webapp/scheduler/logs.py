"""Structured logs for the worker: one line per event, `action=...` first, then its fields."""

from __future__ import annotations

import logging

STANDARD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# An extra field printed on the lines after the event, as an exception would be: a failed run's
# full traceback (for operators; tenants see only its type, message and their job's frames).
TRACEBACK = "traceback"


class KeyValueFormatter(logging.Formatter):
    """`2026-03-08T07:00:00 INFO action=schedule_fired schedule_id=4 scheduled_for=...`."""

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
    text = str(value)
    return f'"{text}"' if not text or any(c in text for c in ' "=') else text


def configure_worker_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger("webapp")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
