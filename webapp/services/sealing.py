"""Secrets the server must read back, stored encrypted at rest: two-factor login's TOTP secrets.

A sealed value is `v1:` and a Fernet token (AES-128-CBC with HMAC-SHA256) under a key derived
from SECRET_KEY by HKDF-SHA256, so a copy of the database (a backup, a replica, a dump) holds no
usable secret without the app's key. No new setting: SECRET_KEY already guards the sessions,
and rotating it keeps sealed values readable while the old key is listed in
SECRET_KEY_FALLBACKS (Flask's own list, which the session cookies honour too). A value without
the prefix is one stored before sealing (plain text), read as it is and sealed at its next use.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flask import current_app

from webapp.config import settings

PREFIX = "v1:"
PURPOSE = b"scheduler: secrets at rest"


def key_from(secret_key: str | bytes) -> Fernet:
    material = secret_key.encode() if isinstance(secret_key, str) else secret_key
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(material)
    return Fernet(base64.urlsafe_b64encode(derived))


def keys() -> MultiFernet:
    """The current key first (it seals), then those of SECRET_KEY_FALLBACKS (they only open)."""
    current: str | bytes = current_app.secret_key or ""
    return MultiFernet(
        [key_from(current)] + [key_from(old) for old in settings().SECRET_KEY_FALLBACKS]
    )


def seal(value: str) -> str:
    return PREFIX + keys().encrypt(value.encode()).decode()


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)


def unseal(stored: str) -> str | None:
    """The value, or None when no key opens it (SECRET_KEY changed, the old one not kept)."""
    if not is_sealed(stored):
        return stored
    try:
        return keys().decrypt(stored.removeprefix(PREFIX).encode()).decode()
    except InvalidToken:
        return None
