"""Subscription secrets at rest: sealed under a key from the settings, so that a database dump
alone cannot sign a delivery.

With `MARKETPLACE_WEBHOOKS_SECRET_KEY` set, a secret is stored as `v1:` and the URL-safe base64
of a random 96-bit nonce and its AES-256-GCM ciphertext, under a key derived from the setting with
HKDF-SHA256. Without it, the secret is stored as `plain:` and the secret itself: a dump then holds
what signs deliveries (a known limit, `docs/webhooks.md`). Secrets stored plain keep working once
a key is set; sealed ones need the same key to be read.
"""

from __future__ import annotations

import base64
import os
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEALED_PREFIX = "v1:"
PLAIN_PREFIX = "plain:"
_NONCE_BYTES = 12
_KEY_INFO = b"marketplace webhook secrets v1"


class SecretUnreadable(Exception):
    """A sealed secret without the key that sealed it."""


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def _aead(key_setting: str) -> AESGCM:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KEY_INFO).derive(
        key_setting.encode("utf-8")
    )
    return AESGCM(key)


def seal(secret: str, key_setting: str | None) -> str:
    """The secret as it is stored."""
    if not key_setting:
        return PLAIN_PREFIX + secret
    aead = _aead(key_setting)
    nonce = os.urandom(_NONCE_BYTES)
    sealed = aead.encrypt(nonce, secret.encode("utf-8"), None)
    return SEALED_PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")


def unseal(stored: str, key_setting: str | None) -> str:
    """The secret a stored value holds; `SecretUnreadable` without the key that sealed it."""
    if stored.startswith(PLAIN_PREFIX):
        return stored[len(PLAIN_PREFIX) :]
    if not stored.startswith(SEALED_PREFIX):
        raise SecretUnreadable("the stored secret is in no known form")
    if not key_setting:
        raise SecretUnreadable("the secret is sealed and MARKETPLACE_WEBHOOKS_SECRET_KEY is unset")
    from cryptography.exceptions import InvalidTag

    aead = _aead(key_setting)
    try:
        raw = base64.urlsafe_b64decode(stored[len(SEALED_PREFIX) :].encode("ascii"))
        return aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], None).decode("utf-8")
    except (InvalidTag, ValueError) as error:
        raise SecretUnreadable(
            "the secret was sealed under another MARKETPLACE_WEBHOOKS_SECRET_KEY"
        ) from error


def is_sealed(stored: str) -> bool:
    return stored.startswith(SEALED_PREFIX)
