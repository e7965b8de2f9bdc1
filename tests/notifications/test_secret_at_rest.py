"""Webhook signing secrets are stored encrypted (a database dump does not hand out the keys that sign the
portal's notifications), still sign every delivery, survive a key rotation, and a secret no configured key
reads fails its delivery with a clear error instead of being signed with anything else."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from test_delivery import _fail
from test_delivery import _webhook as _created

from notifications.models import Delivery, Webhook
from portal import crypto

pytestmark = pytest.mark.django_db


def _webhook(client_for, user, receiver):
    return Webhook.objects.get(pk=_created(client_for, user, receiver)["id"])


def _stored(hook) -> str:
    with connection.cursor() as cur:
        cur.execute(f"SELECT secret FROM {Webhook._meta.db_table} WHERE id = %s", [hook.pk])  # noqa: S608
        return cur.fetchone()[0]


def test_the_secret_is_stored_encrypted_and_still_signs(lab, running_job, go, client_for, receiver):
    hook = _webhook(client_for, lab.alice, receiver)
    raw = _stored(hook)
    assert raw.startswith(crypto.TOKEN_PREFIX) and receiver.secret not in raw
    assert Webhook.objects.get(pk=hook.pk).secret == receiver.secret
    _fail(go, running_job(lab.alice))
    [got] = receiver.received
    assert got["valid"], "the receiver checks the HMAC with the secret it was shown once"


def test_a_key_rotation_keeps_secrets_readable_and_moves_them_to_the_new_key(
        lab, client_for, receiver, settings, capsys):
    settings.FIELD_ENCRYPTION_KEYS = ["old key, long and random"]
    hook = _webhook(client_for, lab.alice, receiver)
    settings.FIELD_ENCRYPTION_KEYS = ["new key, long and random", "old key, long and random"]
    assert Webhook.objects.get(pk=hook.pk).secret == receiver.secret  # the old key still decrypts
    before = _stored(hook)
    call_command("rotate_field_keys")
    assert "re-encrypted 1 webhook secret(s)" in capsys.readouterr().out
    assert _stored(hook) != before
    settings.FIELD_ENCRYPTION_KEYS = ["new key, long and random"]  # the old key dropped
    assert Webhook.objects.get(pk=hook.pk).secret == receiver.secret


def test_a_secret_no_key_reads_fails_its_delivery_clearly_and_the_rotation_names_it(
        lab, running_job, go, client_for, receiver, settings):
    settings.FIELD_ENCRYPTION_KEYS = ["the key that was lost"]
    hook = _webhook(client_for, lab.alice, receiver)
    settings.FIELD_ENCRYPTION_KEYS = ["another key"]
    assert Webhook.objects.get(pk=hook.pk).secret == ""
    r = client_for(lab.alice).get("/api/v1/notifications/webhooks")
    assert r.status_code == 200  # listing still works: the secret is never shown there
    _fail(go, running_job(lab.alice))
    d = Delivery.objects.get(channel="webhook")
    assert (d.status, d.attempts) == ("failed", 1) and "FIELD_ENCRYPTION_KEYS" in d.last_error
    assert receiver.received == []  # nothing sent, rather than signed with a wrong secret
    with pytest.raises(CommandError, match=f"webhooks {hook.pk}"):
        call_command("rotate_field_keys")


def test_the_migration_step_encrypts_plain_secrets_once_and_reverses(lab, client_for, receiver):
    hook = _webhook(client_for, lab.alice, receiver)
    table = Webhook._meta.db_table
    with connection.cursor() as cur:  # a row as the portal stored it before secrets were encrypted
        cur.execute(f"UPDATE {table} SET secret = %s WHERE id = %s", ["whsec_plain", hook.pk])  # noqa: S608
    assert crypto.encrypt_column(connection, table, "secret") == 1
    assert _stored(hook).startswith(crypto.TOKEN_PREFIX)
    assert Webhook.objects.get(pk=hook.pk).secret == "whsec_plain"
    assert crypto.encrypt_column(connection, table, "secret") == 0  # never encrypted twice
    assert crypto.encrypt_column(connection, table, "secret", reverse=True) == 1
    assert _stored(hook) == "whsec_plain"


def test_values_round_trip_and_tokens_differ_for_equal_values(settings):
    settings.FIELD_ENCRYPTION_KEYS = ["k" * 40]
    a, b = crypto.encrypt("whsec_x"), crypto.encrypt("whsec_x")
    assert a != b and crypto.decrypt(a) == crypto.decrypt(b) == "whsec_x"
    assert crypto.is_token(a) and not crypto.is_token("whsec_x")
    with pytest.raises(crypto.Unreadable):
        crypto.decrypt("gAAAAAnot-a-token")
