"""The scheduler: cron math, the tick, leases and the worker loop."""
