"""The error the cron module raises for input that a user must fix."""


class CronError(ValueError):
    """An expression or time zone that a user must fix; the message says how."""
