"""gunicorn settings for the panel in production: `gunicorn -c gunicorn.conf.py`.

Every value can be overridden on the command line or with GUNICORN_CMD_ARGS; the ones an
operator usually changes also come from the environment named beside them. The worker processes
that run jobs are separate (`scheduler-worker`): gunicorn serves only the panel and the API.
"""

import multiprocessing
import os

wsgi_app = "webapp:create_app()"
bind = os.environ.get("SCHEDULER_BIND", "0.0.0.0:8000")

# Requests are short and mostly wait on the database: the usual 2 x CPU + 1 processes, capped so
# that a large machine does not open more database connections than PostgreSQL allows
# (each process keeps its own SQLAlchemy pool).
workers = int(os.environ.get("WEB_CONCURRENCY", min(2 * multiprocessing.cpu_count() + 1, 12)))
threads = int(os.environ.get("SCHEDULER_WEB_THREADS", 2))
# No request takes long (previews are bounded, exports stream a tenant's schedules): a request
# still running after 30 s is stuck, and its process is replaced.
timeout = 30
graceful_timeout = 30  # SIGTERM lets requests in flight finish first (rolling deploys)
keepalive = 5  # above a typical load balancer's idle probe, below its idle timeout
# Recycle processes now and then, at different times, so that a slow leak cannot grow unseen.
max_requests = 10_000
max_requests_jitter = 1_000
# Each process builds its own app (no preload): no database connection or pool is ever shared
# across a fork.
preload_app = False

accesslog = "-"
errorlog = "-"
# Who, what, the answer, its size, how long it took (microseconds), and the proxy's request id.
access_log_format = '%(h)s "%(r)s" %(s)s %(B)s %(D)sus "%(a)s" request_id=%({x-request-id}i)s'

# gunicorn's own handling of X-Forwarded-* is off: the app's ProxyFix, configured by the explicit
# SCHEDULER_TRUSTED_PROXIES setting, is the one place that decides which proxy to believe.
forwarded_allow_ips = ""
proxy_allow_ips = ""
