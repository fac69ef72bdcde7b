"""Two-factor login for password users: a TOTP secret (RFC 6238, pyotp) and ten single-use
recovery codes.

Enrolment stores a new secret with `two_factor_enabled_at` NULL; a correct code from it switches
the second factor on and makes the recovery codes, shown once (only their SHA-256 is kept, as
for session tokens: they are random, not chosen). A TOTP code is accepted one time step either
side of now, and never twice: `totp_last_step` only grows, set by a conditional UPDATE, so two
parallel uses of one code cannot both pass. A recovery code is deleted as it is used.

The secret is stored sealed (`services/sealing.py`: encrypted under a key derived from
SECRET_KEY); one stored in plain text before is read as it is and sealed at its next use.

Users who sign in by single sign-on (or a one-time link) are exempt: their identity provider is
the factor. `auth.complete_login` is told how a user signed in, and only a password login asks
for the code or sends an admin to enrolment.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

import pyotp
import segno
from sqlalchemy import delete, func, select, update
from werkzeug.security import check_password_hash

from webapp.database import write_transaction
from webapp.extensions import db
from webapp.models import RecoveryCode, Tenant, User
from webapp.services import audit, sealing, sessions
from webapp.services.account_schema import AccountError, email_of
from webapp.services.accounts import has_password
from webapp.services.audit import Actor
from webapp.services.sessions import token_hash

ISSUER = "Scheduler"
RECOVERY_CODES = 10
# A code from the step before or after now is accepted too: clocks drift, people type slowly.
DRIFT_STEPS = 1
TOTP_CODE = re.compile(r"[0-9]{6}")
# 16 characters of base32 (80 bits) in groups of four: xxxx-xxxx-xxxx-xxxx.
RECOVERY_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"


class TwoFactorError(ValueError):
    """A refused change, with the form field it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Enrolment:
    """What the setup page shows: the secret for manual entry and its QR code."""

    secret: str
    qr_data_uri: str  # an SVG, made here (the page's CSP allows data: images)


def is_enabled(user: User) -> bool:
    return user.two_factor_enabled_at is not None


def enrolment_of(user: User, secret: str) -> Enrolment:
    uri = pyotp.TOTP(secret).provisioning_uri(name=user.email, issuer_name=ISSUER)
    return Enrolment(secret=secret, qr_data_uri=segno.make_qr(uri).svg_data_uri(scale=5))


def start_enrolment(user: User) -> Enrolment:
    """A new secret for `user`, not yet in force: a correct code from it turns it on."""
    if is_enabled(user):
        raise TwoFactorError("code", "Two-factor login is already on.")
    if not has_password(user):  # single sign-on or a sign-in link: their provider is the factor
        raise TwoFactorError(
            "code",
            "You have no password to protect: you sign in with single sign-on or through the "
            "application that sent you here, which is your second factor.",
        )
    secret = pyotp.random_base32()
    with write_transaction(db.session):
        user.totp_secret = sealing.seal(secret)
        user.totp_last_step = None
    return enrolment_of(user, secret)


def secret_of(user: User) -> str | None:
    """The user's TOTP secret, unsealed (None: none, or sealed under a key no longer known)."""
    return None if user.totp_secret is None else sealing.unseal(user.totp_secret)


def pending_enrolment(user: User) -> Enrolment | None:
    secret = secret_of(user)
    if is_enabled(user) or secret is None:
        return None
    return enrolment_of(user, secret)


def matching_step(secret: str, code: str, now: datetime) -> int | None:
    """The time step whose code `code` is, within the drift, or None."""
    code = code.strip().replace(" ", "")
    if not TOTP_CODE.fullmatch(code):
        return None
    totp = pyotp.TOTP(secret)
    current = totp.timecode(now)
    for step in range(current - DRIFT_STEPS, current + DRIFT_STEPS + 1):
        if hmac.compare_digest(totp.generate_otp(step), code):
            return step
    return None


def use_totp(user: User, code: str, now: datetime) -> bool:
    """Whether `code` is the user's current TOTP code and was not used before; records its step
    (in the caller's transaction)."""
    secret = secret_of(user)
    if secret is None:
        return False
    step = matching_step(secret, code, now)
    if step is None:
        return False
    if user.totp_secret is not None and not sealing.is_sealed(user.totp_secret):
        user.totp_secret = sealing.seal(secret)  # stored in plain text before sealing came
    used = db.session.execute(
        update(User)
        .where(
            User.id == user.id,
            (User.totp_last_step.is_(None)) | (User.totp_last_step < step),
        )
        .values(totp_last_step=step)
        .execution_options(synchronize_session=False)
    )
    return int(used.rowcount or 0) == 1  # type: ignore[attr-defined]


def normalised_recovery_code(code: str) -> str:
    return re.sub(r"[\s-]", "", code).lower()


def use_recovery_code(user: User, code: str) -> bool:
    """Whether `code` is one of the user's unused recovery codes; it is used up (in the caller's
    transaction)."""
    used = db.session.execute(
        delete(RecoveryCode).where(
            RecoveryCode.user_id == user.id,
            RecoveryCode.code_hash == token_hash(normalised_recovery_code(code)),
        )
    )
    return int(used.rowcount or 0) == 1  # type: ignore[attr-defined]


def use_code(user: User, code: str, now: datetime) -> bool:
    """The second step of a login: a TOTP code or a recovery code, each good once. Call in a
    write transaction; a recovery code's use is audited."""
    if not is_enabled(user):
        return False
    if TOTP_CODE.fullmatch(code.strip().replace(" ", "")):
        return use_totp(user, code, now)
    if use_recovery_code(user, code):
        record(user, "user.recovery_code_used", Actor.for_user(user), {"left": codes_left(user)})
        return True
    return False


def new_recovery_codes(user: User) -> list[str]:
    """Replaces the user's recovery codes (in the caller's transaction); the plain codes are
    returned to be shown once."""
    db.session.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user.id))
    codes = [
        "-".join("".join(secrets.choice(RECOVERY_ALPHABET) for _ in range(4)) for _ in range(4))
        for _ in range(RECOVERY_CODES)
    ]
    db.session.add_all(
        RecoveryCode(user_id=user.id, code_hash=token_hash(normalised_recovery_code(code)))
        for code in codes
    )
    return codes


def codes_left(user: User) -> int:
    return (
        db.session.scalar(
            select(func.count()).select_from(RecoveryCode).where(RecoveryCode.user_id == user.id)
        )
        or 0
    )


def confirm_enrolment(user: User, code: str, now: datetime) -> list[str]:
    """Turns two-factor login on if `code` is correct for the pending secret; returns the new
    recovery codes (audited)."""
    secret = secret_of(user)
    if is_enabled(user) or secret is None:
        raise TwoFactorError("code", "Start the setup again: there is no new secret to confirm.")
    with write_transaction(db.session):
        step = matching_step(secret, code, now)
        if step is None:
            raise TwoFactorError(
                "code", "That code is not the current one. Enter the 6 digits your app shows now."
            )
        user.totp_last_step = step
        user.two_factor_enabled_at = now
        codes = new_recovery_codes(user)
        record(user, "user.two_factor_enabled", Actor.for_user(user))
    return codes


def disable(user: User, password: str, code: str, now: datetime) -> None:
    """Turns two-factor login off: needs the password and a current code (or a recovery code)."""
    if not is_enabled(user):
        raise TwoFactorError("code", "Two-factor login is not on.")
    if not check_password_hash(user.password_hash, password):
        raise TwoFactorError("password", "Wrong password.")
    with write_transaction(db.session):
        if not use_code(user, code, now):
            raise TwoFactorError("code", "Wrong or already used code.")
        switch_off(user)
        record(user, "user.two_factor_disabled", Actor.for_user(user))


def reset(email: str, actor: Actor) -> User:
    """An operator turns off a user's second factor (a lost phone and lost codes) and ends the
    user's sessions (whoever holds the lost phone may hold one too); audited. The user signs in
    with the password alone and may enrol again."""
    email = email_of(email)
    with write_transaction(db.session):
        user = db.session.scalar(select(User).where(User.email == email))
        if user is None:
            raise AccountError(f"no user {email!r}")
        if user.totp_secret is None:
            raise AccountError(f"{email} has no two-factor login to reset")
        switch_off(user)
        ended = sessions.end_all(user.id)
        record(user, "user.two_factor_reset", actor, after={"sessions_ended": ended})
    return user


def switch_off(user: User) -> None:
    user.totp_secret = None
    user.totp_last_step = None
    user.two_factor_enabled_at = None
    db.session.execute(delete(RecoveryCode).where(RecoveryCode.user_id == user.id))


def must_enrol(user: User) -> bool:
    """Whether a tenant where `user` is an admin requires two-factor login and it is off. Reads
    the memberships the session's query loaded (no query of its own)."""
    return not is_enabled(user) and any(
        membership.role == "admin" and membership.tenant.require_two_factor_admins
        for membership in user.memberships
    )


def record(user: User, action: str, actor: Actor, after: dict[str, int] | None = None) -> None:
    """An installation-wide audit row about the user's second factor (never the secret)."""
    audit.record_event(
        db.session(), actor, action, ("user", user.id, user.email), tenant_id=None, after=after
    )


def require_for_admins(tenant: Tenant, required: bool, actor: Actor) -> bool:
    """Sets a tenant's "require two-factor login for admins" (audited in its log); whether it
    changed."""
    with write_transaction(db.session):
        was = bool(tenant.require_two_factor_admins)
        if was == required:
            return False
        tenant.require_two_factor_admins = required
        audit.record_event(
            db.session(),
            actor,
            "tenant.two_factor_required",
            ("tenant", tenant.id, tenant.slug),
            tenant_id=tenant.id,
            before={"require_two_factor_admins": was},
            after={"require_two_factor_admins": required},
        )
    return True
