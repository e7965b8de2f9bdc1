"""API tokens: hashed at rest, expiring, revocable; created from a session only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import ApiToken

pytestmark = pytest.mark.django_db


def bearer(secret):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return c


def test_token_roundtrip_and_storage(lab, client_for):
    r = client_for(lab.alice).post("/api/v1/tokens", {"name": "notebook"}, format="json")
    assert r.status_code == 201
    secret = r.json()["token"]
    stored = ApiToken.objects.get()
    assert secret not in (stored.key_hash, stored.key_id) and len(stored.key_hash) == 64
    me = bearer(secret).get("/api/v1/me")
    assert me.status_code == 200 and me.json()["username"] == "alice"
    assert "token" not in client_for(lab.alice).get("/api/v1/tokens").json()["results"][0]


def test_expired_revoked_and_wrong_tokens_are_401(lab):
    token, secret = ApiToken.issue(user=lab.alice, name="x")
    assert bearer(secret).get("/api/v1/me").status_code == 200
    forged = secret[:-2] + ("zz" if not secret.endswith("zz") else "yy")  # never the secret itself, whatever it ends with
    wrong = bearer(forged).get("/api/v1/me")
    assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "Invalid API token."
    assert bearer("gpp_nope").get("/api/v1/me").status_code == 401
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    r = bearer(secret).get("/api/v1/me")
    assert r.status_code == 401 and r.json()["error"]["code"] == "authentication_failed"
    assert "expired" in r.json()["error"]["message"] and "Tokens page" in r.json()["error"]["message"]
    # A wrong secret for the expired key id learns nothing about it.
    assert bearer(forged).get("/api/v1/me").json()["error"]["message"] == "Invalid API token."
    token2, secret2 = ApiToken.issue(user=lab.alice, name="y")
    APIClient().force_authenticate(lab.alice)
    c = APIClient()
    c.force_login(lab.alice)
    assert c.post(f"/api/v1/tokens/{token2.pk}/revoke").status_code == 200
    revoked = bearer(secret2).get("/api/v1/me")
    assert revoked.status_code == 401 and "revoked" in revoked.json()["error"]["message"]


def test_token_cannot_mint_tokens_and_tokens_are_private(lab):
    _, secret = ApiToken.issue(user=lab.alice, name="x")
    assert bearer(secret).post("/api/v1/tokens", {"name": "more"}, format="json").status_code == 403
    other, _ = ApiToken.issue(user=lab.bob, name="bobs")
    c = APIClient()
    c.force_login(lab.alice)
    assert c.post(f"/api/v1/tokens/{other.pk}/revoke").status_code == 404


def test_submit_with_token_from_a_notebook(lab, payload):
    _, secret = ApiToken.issue(user=lab.bob, name="nb")
    r = bearer(secret).post("/api/v1/jobs", payload(), format="json")
    assert r.status_code == 201 and r.json()["department"] == "nlp"


def test_session_api_writes_need_csrf(lab, payload):
    c = APIClient(enforce_csrf_checks=True)
    c.force_login(lab.alice)
    r = c.post("/api/v1/jobs", payload(), format="json")
    assert r.status_code == 403


def test_issue_token_command(lab, capsys):
    from django.core.management import CommandError, call_command

    call_command("issue_token", "bob", "--name", "nb", "--days", "7")
    secret = capsys.readouterr().out.strip()
    assert bearer(secret).get("/api/v1/me").json()["username"] == "bob"
    for args in (["nobody"], ["bob", "--days", "0"], ["bob", "--name", " "]):
        with pytest.raises(CommandError):
            call_command("issue_token", *args)


def test_a_misspelt_token_field_is_a_400_and_issues_nothing(lab, client_for):
    # "ttl" instead of "ttl_days" must not silently mint a token with the default lifetime
    r = client_for(lab.alice).post("/api/v1/tokens", {"name": "notebook", "ttl": 3}, format="json")
    assert r.status_code == 400
    assert r.json()["error"]["fields"]["ttl"][0]["code"] == "unknown_field"
    assert not ApiToken.objects.filter(user=lab.alice).exists()
