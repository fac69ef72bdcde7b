"""A Celery worker takes over only a run that has not started: a forged or repeated message,
even one that names the Celery worker itself as the sender, never runs a running job a second
time (both databases)."""

from __future__ import annotations

from datetime import timedelta

from flask import Flask

from tests.conftest import WorkerFactory, World
from webapp.database import utcnow, write_transaction
from webapp.extensions import db
from webapp.models import Run
from webapp.scheduler.celery_tasks import take_over
from webapp.scheduler.leases import lease_once

TTL = timedelta(minutes=5)


def test_a_message_naming_the_celery_worker_as_sender_takes_over_nothing(
    app: Flask, world: World, make_worker: WorkerFactory
) -> None:
    sender, celery = make_worker().id, make_worker().id
    now = utcnow()
    with write_transaction(db.session) as session:
        run = Run(
            tenant_id=world.alpha.id,
            job="demo.echo",
            args={"message": "once"},
            trigger="manual",
            scheduled_for=now,
            available_at=now,
            queued_at=now,
            idempotency_key="take-over:1",
        )
        session.add(run)
    [leased] = lease_once(db.session(), sender, now, TTL, 1)
    key = leased.idempotency_key
    taken = take_over(db.session(), run.id, leased.attempt, key, sender, celery, TTL)
    assert taken is not None and taken.started_at is not None
    # The same message again, and a forged one naming the Celery worker itself as sender.
    for named_sender in (sender, celery):
        again = take_over(db.session(), run.id, leased.attempt, key, named_sender, celery, TTL)
        assert again is None, named_sender
    db.session.expire_all()
    stored = db.session.get_one(Run, run.id)
    assert (stored.worker_id, stored.started_at) == (celery, taken.started_at)
