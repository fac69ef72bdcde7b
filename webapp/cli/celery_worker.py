"""The Celery app that a fleet's workers run: `celery -A webapp.cli.celery_worker worker`.

It builds the Flask app as `flask --app webapp` does (defaults, the instance folder's config.py,
the environment), the Celery app from its SCHEDULER_CELERY_* settings, and installs the task
`webapp.run` (webapp.scheduler.celery_tasks). Built when Celery first asks for the module's
`celery` attribute, not at import.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def build() -> Any:
    from webapp import create_app
    from webapp.config import settings
    from webapp.scheduler.celery_executor import make_celery
    from webapp.scheduler.celery_tasks import install_tasks
    from webapp.scheduler.logs import configure_worker_logging

    app = create_app()
    chosen = settings(app)
    configure_worker_logging(chosen.SCHEDULER_LOG_FORMAT, chosen.SCHEDULER_LOG_LEVEL)
    celery = make_celery(chosen)
    install_tasks(celery, app)
    return celery


def __getattr__(name: str) -> Any:
    """`celery`: the Celery app (Celery's `-A` looks for `app`, then `celery`)."""
    if name == "celery":
        return build()
    raise AttributeError(name)
