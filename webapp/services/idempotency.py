"""Idempotency keys of API POSTs: the first answer to a key is replayed to its retries for 24 h.

A request claims its key before it runs (a row without a status); its 2xx answer (body,
Location, ETag) is then stored on the row, any other outcome frees the key for a retry. A retry
of a request still running, or one whose answer was lost in a crash between the change and the
storing of its answer, meets the claimed row and is told so (never run twice); after 24 h the key
is forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from webapp.database import write_transaction
from webapp.extensions import db
from webapp.token_models import ApiIdempotencyKey

KEPT = timedelta(hours=24)


@dataclass(frozen=True)
class Claimed:
    claim_id: int


@dataclass(frozen=True)
class Stored:
    status: int
    body: str
    location: str | None
    etag: str | None


@dataclass(frozen=True)
class InProgress:
    """The key's first request has not finished (or its answer was lost)."""


@dataclass(frozen=True)
class Mismatch:
    """The key was first used for another request."""


def claim(
    token_id: int, key: str, request_hash: str, now: datetime
) -> Claimed | Stored | InProgress | Mismatch:
    """Claims `key` for a request, or says what became of its first use."""
    try:
        with write_transaction(db.session):
            db.session.execute(
                delete(ApiIdempotencyKey).where(
                    ApiIdempotencyKey.token_id == token_id,
                    ApiIdempotencyKey.created_at < now - KEPT,
                )
            )
            row = db.session.scalar(
                select(ApiIdempotencyKey).where(
                    ApiIdempotencyKey.token_id == token_id, ApiIdempotencyKey.key == key
                )
            )
            if row is not None:
                if row.request_hash != request_hash:
                    return Mismatch()
                if row.status is None or row.body is None:
                    return InProgress()
                return Stored(row.status, row.body, row.location, row.etag)
            row = ApiIdempotencyKey(
                token_id=token_id, key=key, request_hash=request_hash, created_at=now
            )
            db.session.add(row)
            db.session.flush()
            return Claimed(row.id)
    except IntegrityError:  # a concurrent request claimed it first (PostgreSQL)
        return InProgress()


def complete(
    claimed: Claimed, status: int, body: str, location: str | None, etag: str | None
) -> None:
    """Stores the answer of a claimed key's request (its body and headers), for its retries."""
    with write_transaction(db.session):
        db.session.execute(
            update(ApiIdempotencyKey)
            .where(ApiIdempotencyKey.id == claimed.claim_id)
            .values(status=status, body=body, location=location, etag=etag)
        )


def release(claimed: Claimed) -> None:
    """Frees a claimed key whose request did not succeed: a retry runs it again."""
    with write_transaction(db.session):
        db.session.execute(
            delete(ApiIdempotencyKey).where(ApiIdempotencyKey.id == claimed.claim_id)
        )
