"""Secrets the portal must read back (a webhook's signing secret) are stored encrypted, so that a database dump
or a read-only replica does not hand out the keys that sign the portal's notifications.

Fernet (AES-128-CBC with HMAC-SHA256, from ``cryptography``) under ``settings.FIELD_ENCRYPTION_KEYS``: the first
key encrypts, every key decrypts (``MultiFernet``), so a key is rotated by putting the new one first, running
``manage.py rotate_field_keys`` (which re-encrypts every stored value with it) and then dropping the old one.
A key is any string: the Fernet key is derived from it with SHA-256, so an operator can use a long random
password. By default the one key is ``SECRET_KEY``; changing ``SECRET_KEY`` then needs the old one kept in
``FIELD_ENCRYPTION_KEYS`` until the rotation ran.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models

log = logging.getLogger(__name__)

# Fernet tokens are URL-safe base64 of a version byte 0x80 and a timestamp: they always start like this.
TOKEN_PREFIX = "gAAAAA"


class Unreadable(ValueError):
    """A stored value none of the configured keys decrypts."""


def _fernet(key: str) -> Fernet:
    digest = hashlib.sha256(b"gpu-portal field encryption\x00" + key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


@functools.cache
def _keyring(keys: tuple[str, ...]) -> MultiFernet:
    if not keys:
        raise ValueError("FIELD_ENCRYPTION_KEYS is empty")
    return MultiFernet([_fernet(k) for k in keys])


def keyring() -> MultiFernet:
    return _keyring(tuple(settings.FIELD_ENCRYPTION_KEYS))


def encrypt(text: str) -> str:
    return keyring().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return keyring().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise Unreadable("none of FIELD_ENCRYPTION_KEYS decrypts this value") from exc


def is_token(value: str) -> bool:
    """Whether ``value`` is already a token of the current keys (so it is not encrypted twice)."""
    if not value.startswith(TOKEN_PREFIX):
        return False
    try:
        decrypt(value)
    except Unreadable:
        return False
    return True


class EncryptedCharField(models.CharField):
    """A CharField stored encrypted. Python code sees the plain text; the column holds a Fernet token (a new
    one at every save, so equal values do not look equal in the database, and lookups by value never match).
    A value no configured key decrypts reads as "" and is logged: the caller treats it as missing (a webhook
    whose secret cannot be read is not signed with anything else)."""

    description = "Text encrypted at rest"

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        try:
            return decrypt(value)
        except Unreadable:
            log.error("%s: a stored value cannot be decrypted with FIELD_ENCRYPTION_KEYS", self)
            return ""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(value)


def encrypt_column(connection, table: str, column: str, *, reverse: bool = False) -> int:
    """Encrypt every plain value of ``table.column`` (``reverse``: decrypt every token back to plain text), in
    place; the migration that turns a column into an ``EncryptedCharField`` runs it. Values already encrypted
    (or, reversed, already plain) are left alone, so it may run twice. Returns how many rows it changed."""
    qn = connection.ops.quote_name  # the names come from the model, quoted; every value is a parameter
    changed = 0
    with connection.cursor() as cur:
        cur.execute(f"SELECT id, {qn(column)} FROM {qn(table)} ORDER BY id")  # noqa: S608
        rows = cur.fetchall()
        for pk, value in rows:
            if not value:
                continue
            if reverse:
                if not value.startswith(TOKEN_PREFIX):
                    continue
                new = decrypt(value)
            else:
                if is_token(value):
                    continue
                new = encrypt(value)
            cur.execute(f"UPDATE {qn(table)} SET {qn(column)} = %s WHERE id = %s", [new, pk])  # noqa: S608
            changed += 1
    return changed
