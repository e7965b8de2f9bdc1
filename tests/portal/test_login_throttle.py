"""Brute force is stopped: per account and per client IP on the log-in form and for API tokens, lockouts are
audited once, and nothing tells an attacker whether an account exists."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from portal.models import ApiToken, AuditEntry

pytestmark = pytest.mark.django_db

PASSWORD = "pw-alice-long-enough"  # the lab fixture's password for alice


def _login(username, password, ip="10.0.0.1"):
    return Client(REMOTE_ADDR=ip).post("/login/", {"username": username, "password": password})


def _fail(username, times, ip="10.0.0.1"):
    return [_login(username, "wrong-password", ip).status_code for _ in range(times)]


def test_an_account_is_locked_after_the_limit_even_for_the_right_password_and_the_lockout_is_audited_once(
    lab, settings
):
    assert _fail("alice", settings.AXES_FAILURE_LIMIT - 1) == [200] * (settings.AXES_FAILURE_LIMIT - 1)
    assert _login("alice", "wrong-password").status_code == 429  # the limit-th failure locks
    refused = _login("alice", PASSWORD, ip="10.9.9.9")  # another address: still the same account
    assert refused.status_code == 429 and "_auth_user_id" not in refused.wsgi_request.session
    assert b"Too many failed attempts" in refused.content and refused["Retry-After"]
    _login("alice", PASSWORD)
    _login("alice", PASSWORD, ip="10.9.9.9")
    entries = AuditEntry.objects.filter(action="auth.lockout")
    assert sorted((e.object_id, e.new["ip_address"]) for e in entries) == [("alice", "10.0.0.1"),
                                                                           ("alice", "10.9.9.9")]


def test_a_success_before_the_limit_resets_the_count(lab, settings):
    _fail("alice", settings.AXES_FAILURE_LIMIT - 1)
    assert _login("alice", PASSWORD).status_code == 302
    assert _fail("alice", settings.AXES_FAILURE_LIMIT - 1) == [200] * (settings.AXES_FAILURE_LIMIT - 1)


def test_one_address_trying_many_accounts_is_locked_out(lab, settings):
    for i in range(settings.AXES_FAILURE_LIMIT):
        _login(f"user{i}", "wrong-password", ip="10.6.6.6")
    assert _login("alice", PASSWORD, ip="10.6.6.6").status_code == 429
    assert _login("alice", PASSWORD, ip="10.0.0.2").status_code == 302  # other addresses are not affected


def test_nothing_tells_whether_an_account_exists(lab, settings):
    limit = settings.AXES_FAILURE_LIMIT
    known = [_login("alice", "wrong-password", ip="10.1.1.1") for _ in range(limit + 1)]
    unknown = [_login("nobody-here", "wrong-password", ip="10.2.2.2") for _ in range(limit + 1)]
    for a, b in zip(known, unknown, strict=True):
        assert a.status_code == b.status_code
        assert _page(a, b"alice") == _page(b, b"nobody-here")


def _page(response, username: bytes) -> bytes:
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]+"', b"", response.content.replace(username, b"X"))


def test_guessing_api_tokens_is_locked_out_per_address_with_the_json_error(lab, client, settings):
    token, secret = ApiToken.issue(user=lab.alice, name="nb")
    ok = {"HTTP_AUTHORIZATION": f"Bearer {secret}", "REMOTE_ADDR": "10.3.3.3"}
    assert client.get("/api/v1/me", **ok).status_code == 200
    codes = [client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer gpp_guess{i}_nope",
                        REMOTE_ADDR="10.4.4.4").status_code for i in range(settings.AXES_FAILURE_LIMIT)]
    assert codes == [401] * (settings.AXES_FAILURE_LIMIT - 1) + [429]
    r = client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR="10.4.4.4")
    assert r.status_code == 429 and r.json()["error"]["code"] == "throttled"
    assert client.get("/api/v1/me", **ok).status_code == 200  # the token's owner elsewhere is unaffected
    assert AuditEntry.objects.filter(action="auth.lockout").exists()


@pytest.mark.parametrize("header", ["\xa0", " ", "Bearer", "Bearer a b"])
def test_a_malformed_authorization_header_is_a_json_401_not_a_500(lab, client, header):
    r = client.get("/api/v1/me", HTTP_AUTHORIZATION=header)
    assert r.status_code == 401 and r.json()["error"]["code"] == "authentication_failed"
