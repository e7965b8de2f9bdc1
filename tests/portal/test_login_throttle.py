"""Brute force is throttled per account and per client IP on the log-in form and for API tokens: past the
limit wrong attempts get 429 with Retry-After, lockouts are audited once, a right credential always passes
(nobody is locked out by someone else's failures), and nothing tells an attacker whether an account exists."""

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


def _retry_after(response) -> int:
    """The lockout's ``Retry-After``, in whole seconds: within the cool-off."""
    value = int(response["Retry-After"])
    assert 0 < value <= 15 * 60
    return value


def test_past_the_limit_wrong_passwords_get_429_with_retry_after_and_the_lockout_is_audited_once(lab, settings):
    assert _fail("alice", settings.AXES_FAILURE_LIMIT - 1) == [200] * (settings.AXES_FAILURE_LIMIT - 1)
    locked = _login("alice", "wrong-password")  # the limit-th failure locks
    assert locked.status_code == 429 and b"Too many failed attempts" in locked.content
    assert _retry_after(locked) == settings.AXES_COOLOFF_TIME.total_seconds()
    elsewhere = _login("alice", "wrong-password", ip="10.9.9.9")  # another address: still the same account
    assert elsewhere.status_code == 429 and "_auth_user_id" not in elsewhere.wsgi_request.session
    _retry_after(elsewhere)
    _login("alice", "wrong-password")
    _login("alice", "wrong-password", ip="10.9.9.9")
    entries = AuditEntry.objects.filter(action="auth.lockout")
    assert sorted((e.object_id, e.new["ip_address"]) for e in entries) == [("alice", "10.0.0.1"),
                                                                           ("alice", "10.9.9.9")]


def test_the_owner_logs_in_with_the_right_password_while_strangers_keep_failing_on_the_account(lab, settings):
    _fail("alice", settings.AXES_FAILURE_LIMIT + 2, ip="10.6.6.6")  # somebody guessing alice's password
    owner = _login("alice", PASSWORD, ip="10.0.0.9")
    assert owner.status_code == 302 and owner.wsgi_request.session["_auth_user_id"] == str(lab.alice.pk)
    assert _login("alice", PASSWORD, ip="10.6.6.6").status_code == 302  # the guesser's address too: it is right


def test_a_success_before_the_limit_resets_the_count(lab, settings):
    _fail("alice", settings.AXES_FAILURE_LIMIT - 1)
    assert _login("alice", PASSWORD).status_code == 302
    assert _fail("alice", settings.AXES_FAILURE_LIMIT - 1) == [200] * (settings.AXES_FAILURE_LIMIT - 1)


def test_one_address_trying_many_accounts_gets_429_for_wrong_passwords_but_not_for_right_ones(lab, settings):
    for i in range(settings.AXES_FAILURE_LIMIT):
        _login(f"user{i}", "wrong-password", ip="10.6.6.6")
    wrong = _login("alice", "wrong-password", ip="10.6.6.6")
    assert wrong.status_code == 429
    _retry_after(wrong)
    assert _login("alice", PASSWORD, ip="10.6.6.6").status_code == 302  # a NAT's other users are not locked out
    # ... and alice's success forgets alice's failures only, not the address's guesses at other accounts
    assert _login("user0", "wrong-password", ip="10.6.6.6").status_code == 429
    assert _login("alice", PASSWORD, ip="10.0.0.2").status_code == 302


def test_nothing_tells_whether_an_account_exists(lab, settings):
    limit = settings.AXES_FAILURE_LIMIT
    known = [_login("alice", "wrong-password", ip="10.1.1.1") for _ in range(limit + 1)]
    unknown = [_login("nobody-here", "wrong-password", ip="10.2.2.2") for _ in range(limit + 1)]
    for a, b in zip(known, unknown, strict=True):
        assert a.status_code == b.status_code
        assert _page(a, b"alice") == _page(b, b"nobody-here")


def _page(response, username: bytes) -> bytes:
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]+"', b"", response.content.replace(username, b"X"))


def _me(client, secret, ip):
    return client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=ip)


def test_junk_tokens_from_an_address_get_429_but_its_valid_tokens_and_log_ins_still_work(lab, client, settings):
    _, alice_secret = ApiToken.issue(user=lab.alice, name="nb")
    _, bob_secret = ApiToken.issue(user=lab.bob, name="nb")
    codes = [_me(client, f"gpp_guess{i}_nope", "10.4.4.4").status_code
             for i in range(settings.AXES_FAILURE_LIMIT + 2)]
    assert codes == [401] * (settings.AXES_FAILURE_LIMIT - 1) + [429] * 3
    for secret, name in ((alice_secret, "alice"), (bob_secret, "bob")):
        r = _me(client, secret, "10.4.4.4")
        assert r.status_code == 200 and r.json()["username"] == name
    assert _login("alice", PASSWORD, ip="10.4.4.4").status_code == 302
    wrong = _me(client, "gpp_guess99_nope", "10.4.4.4")  # wrong ones from there are still refused
    assert wrong.status_code == 429 and wrong.json()["error"]["code"] == "throttled"
    assert _retry_after(wrong) == settings.AXES_COOLOFF_TIME.total_seconds()
    assert AuditEntry.objects.filter(action="auth.lockout").exists()


def test_bad_secrets_on_a_victims_key_id_do_not_lock_out_the_victims_token(lab, client, settings):
    token, secret = ApiToken.issue(user=lab.alice, name="nb")
    forged = f"gpp_{token.key_id}_not-the-secret"
    codes = [_me(client, forged, f"10.5.5.{i}").status_code for i in range(settings.AXES_FAILURE_LIMIT + 2)]
    assert codes == [401] * (settings.AXES_FAILURE_LIMIT - 1) + [429] * 3  # counted per key id, any address
    _retry_after(_me(client, forged, "10.5.5.200"))
    for ip in ("10.7.7.7", "10.5.5.0"):  # the owner's address, and an attacker's
        assert _me(client, secret, ip).status_code == 200


@pytest.mark.parametrize("header", ["\xa0", " ", "Bearer", "Bearer a b"])
def test_a_malformed_authorization_header_is_a_json_401_not_a_500(lab, client, header):
    r = client.get("/api/v1/me", HTTP_AUTHORIZATION=header)
    assert r.status_code == 401 and r.json()["error"]["code"] == "authentication_failed"
