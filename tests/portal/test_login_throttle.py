"""Log-in throttling with device cookies (portal/lockout.py). Past the limit an account name or an address is
paused for unknown devices, whatever the password (guessing stops), while a browser that signed in before keeps
signing in on its own count; forged, expired and other accounts' device cookies are unknown devices; every 429
has Retry-After; lockouts are audited once; nothing tells whether an account exists. API tokens: verified
first, wrong ones counted per key id and per address."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client

from portal import lockout
from portal.models import ApiToken, AuditEntry

pytestmark = pytest.mark.django_db

PASSWORD = "pw-alice-long-enough"  # the lab fixture's password for alice
LIMIT = 3  # a small limit keeps the password hashing of these tests short; the rules do not depend on it


@pytest.fixture(autouse=True)
def small_limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT


def _login(username, password, ip="10.0.0.1", client=None):
    client = client or Client(REMOTE_ADDR=ip)
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def _fail(username, times, ip="10.0.0.1", client=None):
    return [_login(username, "wrong-password", ip, client).status_code for _ in range(times)]


def _device(username, ip="10.0.0.1"):
    """A browser that has signed in as ``username`` (and signed out): it holds a device cookie."""
    client = Client(REMOTE_ADDR=ip)
    assert _login(username, f"pw-{username}-long-enough", ip, client).status_code == 302
    client.post("/logout/")
    assert client.cookies[lockout.device_cookie_name()].value
    return client


def _signed_in(response) -> bool:
    return "_auth_user_id" in response.wsgi_request.session


def _retry_after(response) -> int:
    """The lock's ``Retry-After``, in whole seconds: within the cool-off."""
    value = int(response["Retry-After"])
    assert 0 < value <= 15 * 60
    return value


def _paused(response) -> bool:
    return (response.status_code == 429 and not _signed_in(response)
            and b"Sign-in is paused for 15 minutes" in response.content and _retry_after(response) > 0)


def _age_failures(minutes):
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.first().attempt_time - timedelta(minutes=minutes))


def test_past_the_limit_sign_in_is_paused_with_retry_after_and_the_lockout_is_audited_once(lab, settings):
    assert _fail("alice", LIMIT - 1) == [200] * (LIMIT - 1)
    locked = _login("alice", "wrong-password")  # the limit-th failure locks
    assert _paused(locked) and _retry_after(locked) == settings.AXES_COOLOFF_TIME.total_seconds()
    elsewhere = _login("alice", "wrong-password", ip="10.9.9.9")  # another address: still the same account
    assert _paused(elsewhere)
    _login("alice", "wrong-password")
    _login("alice", "wrong-password", ip="10.9.9.9")
    entries = AuditEntry.objects.filter(action="auth.lockout")
    assert sorted((e.object_id, e.new["ip_address"]) for e in entries) == [("alice", "10.0.0.1"),
                                                                           ("alice", "10.9.9.9")]


def test_the_right_password_after_the_limit_from_an_unknown_device_is_refused(lab):
    """The guessing case: a lock that refused only wrong answers let the guesser go on until the right one."""
    _fail("alice", LIMIT + 2, ip="10.6.6.6")
    for ip in ("10.6.6.6", "10.0.0.9"):  # the guesser's address, and any other
        assert _paused(_login("alice", PASSWORD, ip=ip))


def test_the_owner_signs_in_from_a_browser_that_signed_in_before_during_the_lock(lab):
    laptop = _device("alice", ip="10.0.0.9")
    _fail("alice", LIMIT + 2, ip="10.6.6.6")  # somebody guessing alice's password
    old_cookie = laptop.cookies[lockout.device_cookie_name()].value
    owner = _login("alice", PASSWORD, ip="10.0.0.9", client=laptop)
    assert owner.status_code == 302 and owner.wsgi_request.session["_auth_user_id"] == str(lab.alice.pk)
    assert laptop.cookies[lockout.device_cookie_name()].value != old_cookie  # a new cookie on each sign-in
    assert _paused(_login("alice", PASSWORD, ip="10.0.0.9"))  # the owner's success leaves unknown devices out


def test_a_trusted_devices_failures_lock_that_device_alone(lab):
    laptop, phone = _device("alice"), _device("alice")
    assert _fail("alice", LIMIT - 1, client=laptop) == [200] * (LIMIT - 1)
    assert _paused(_login("alice", "wrong-password", client=laptop))
    assert _paused(_login("alice", PASSWORD, client=laptop))  # a stolen device does not guess on
    assert _login("alice", PASSWORD, client=phone).status_code == 302  # the owner's other browser
    assert _login("alice", PASSWORD, ip="10.0.0.2").status_code == 302  # nor the account for unknown devices


@pytest.mark.parametrize("forge", ["bad_signature", "other_account", "expired", "garbage"])
def test_a_forged_expired_or_other_accounts_device_cookie_is_an_unknown_device(lab, forge, monkeypatch):
    mallory = _device("amy", ip="10.6.6.6")  # the attacker's own account's device cookie
    name = lockout.device_cookie_name()
    if forge == "bad_signature":
        value = lockout.issue_device_cookie("alice", now=lockout.clock())
        mallory.cookies[name] = value[:-2] + ("AA" if not value.endswith("AA") else "BB")
    elif forge == "expired":
        alice = _device("alice")
        mallory.cookies[name] = alice.cookies[name].value
        later = lockout.clock() + lockout.settings.LOGIN_DEVICE_COOKIE_AGE.total_seconds() + 1
        monkeypatch.setattr(lockout, "clock", lambda: later)
    elif forge == "garbage":
        mallory.cookies[name] = "alice:device:x"
    _fail("alice", LIMIT, ip="10.6.6.6", client=mallory)  # counted against alice's name, not a device
    assert set(AccessAttempt.objects.values_list("username", flat=True)) == {"alice"}
    assert _paused(_login("alice", PASSWORD, ip="10.6.6.6", client=mallory))


def test_the_device_cookie_is_host_only_http_only_and_kept_for_its_age(lab, settings):
    cookie = _device("alice").cookies[lockout.device_cookie_name()]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/" and not cookie["domain"]
    assert int(cookie["max-age"]) == settings.LOGIN_DEVICE_COOKIE_AGE.total_seconds()


def test_a_browser_that_signed_in_through_an_invitations_link_is_trusted_too(lab):
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    uid, token = urlsafe_base64_encode(force_bytes(lab.alice.pk)), default_token_generator.make_token(lab.alice)
    browser = Client(REMOTE_ADDR="10.0.0.3")
    form = browser.get(f"/accounts/set-password/{uid}/{token}/")["Location"]
    chosen = "a-long-enough-secret-9"
    assert browser.post(form, {"new_password1": chosen, "new_password2": chosen}).status_code == 302
    browser.post("/logout/")
    _fail("alice", LIMIT, ip="10.6.6.6")
    assert _login("alice", chosen, ip="10.0.0.3", client=browser).status_code == 302


def test_a_device_cookie_is_valid_for_its_account_until_it_expires():
    value = lockout.issue_device_cookie("alice", now=1_000.0)
    age = lockout.settings.LOGIN_DEVICE_COOKIE_AGE.total_seconds()
    assert lockout.device_of(value, "alice", now=1_000.0 + age - 1)
    assert lockout.device_of(value, "alice", now=1_000.0 + age) is None
    assert lockout.device_of(value, "amy", now=1_000.0) is None
    assert lockout.device_of(value.replace("alice", "amy"), "amy", now=1_000.0) is None


def test_one_address_sweeping_many_accounts_is_paused_for_unknown_devices(lab):
    laptop = _device("alice", ip="10.6.6.6")  # a colleague behind the same NAT, who signed in before
    for i in range(LIMIT):
        _login(f"user{i}", "wrong-password", ip="10.6.6.6")
    assert _paused(_login("alice", PASSWORD, ip="10.6.6.6"))  # the sweep's next guess, right or wrong
    assert _paused(_login("amy", "wrong-password", ip="10.6.6.6"))
    assert _login("alice", PASSWORD, ip="10.6.6.6", client=laptop).status_code == 302
    assert _login("amy", "pw-amy-long-enough", ip="10.0.0.2").status_code == 302  # other addresses: untouched
    # alice's success forgets her device's failures only, not the address's guesses at other accounts
    assert _paused(_login("user0", "wrong-password", ip="10.6.6.6"))


def test_retry_after_is_what_is_left_of_the_cool_off_and_then_sign_in_works_again(lab, settings):
    _fail("alice", LIMIT)
    _age_failures(minutes=5)
    refused = _login("alice", PASSWORD)  # 10 minutes left: the page says so
    assert refused.status_code == 429 and b"Sign-in is paused for 10 minutes" in refused.content
    assert 595 <= _retry_after(refused) <= 600
    _age_failures(minutes=11)  # the cool-off is over
    assert _login("alice", PASSWORD).status_code == 302


def test_refused_attempts_are_not_counted(lab):
    _fail("alice", LIMIT)
    _fail("alice", 5)
    _login("alice", PASSWORD)
    assert sum(a.failures_since_start for a in AccessAttempt.objects.all()) == LIMIT


def test_the_admin_log_in_is_paused_too(lab):
    lab.alice.is_staff = True
    lab.alice.save()
    _fail("alice", LIMIT)
    r = Client(REMOTE_ADDR="10.0.0.1").post("/admin/login/", {"username": "alice", "password": PASSWORD})
    assert r.status_code == 429 and _retry_after(r) and not _signed_in(r)


def test_a_success_before_the_limit_resets_the_count(lab):
    _fail("alice", LIMIT - 1)
    assert _login("alice", PASSWORD).status_code == 302
    assert _fail("alice", LIMIT - 1) == [200] * (LIMIT - 1)


def test_nothing_tells_whether_an_account_exists(lab):
    known = [_login("alice", "wrong-password", ip="10.1.1.1") for _ in range(LIMIT + 1)]
    unknown = [_login("nobody-here", "wrong-password", ip="10.2.2.2") for _ in range(LIMIT + 1)]
    for a, b in zip(known, unknown, strict=True):
        assert a.status_code == b.status_code
        assert _page(a, b"alice") == _page(b, b"nobody-here")
        assert ("Retry-After" in a) == ("Retry-After" in b)


def _page(response, username: bytes) -> bytes:
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]+"', b"", response.content.replace(username, b"X"))


def _me(client, secret, ip):
    return client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=ip)


def test_junk_tokens_from_an_address_get_429_but_its_valid_tokens_and_trusted_log_ins_still_work(lab, client):
    laptop = _device("alice", ip="10.4.4.4")
    _, alice_secret = ApiToken.issue(user=lab.alice, name="nb")
    _, bob_secret = ApiToken.issue(user=lab.bob, name="nb")
    codes = [_me(client, f"gpp_guess{i}_nope", "10.4.4.4").status_code
             for i in range(LIMIT + 2)]
    assert codes == [401] * (LIMIT - 1) + [429] * 3
    for secret, name in ((alice_secret, "alice"), (bob_secret, "bob")):
        r = _me(client, secret, "10.4.4.4")
        assert r.status_code == 200 and r.json()["username"] == name
    assert _login("alice", PASSWORD, ip="10.4.4.4", client=laptop).status_code == 302
    assert _paused(_login("alice", PASSWORD, ip="10.4.4.4"))  # the address is a scanner's: unknown devices wait
    wrong = _me(client, "gpp_guess99_nope", "10.4.4.4")  # wrong ones from there are still refused
    assert wrong.status_code == 429 and wrong.json()["error"]["code"] == "throttled"
    assert _retry_after(wrong) == 15 * 60
    assert AuditEntry.objects.filter(action="auth.lockout").exists()


def test_bad_secrets_on_a_victims_key_id_do_not_lock_out_the_victims_token(lab, client):
    token, secret = ApiToken.issue(user=lab.alice, name="nb")
    forged = f"gpp_{token.key_id}_not-the-secret"
    codes = [_me(client, forged, f"10.5.5.{i}").status_code for i in range(LIMIT + 2)]
    assert codes == [401] * (LIMIT - 1) + [429] * 3  # counted per key id, any address
    _retry_after(_me(client, forged, "10.5.5.200"))
    for ip in ("10.7.7.7", "10.5.5.0"):  # the owner's address, and an attacker's
        assert _me(client, secret, ip).status_code == 200


@pytest.mark.parametrize("header", ["\xa0", " ", "Bearer", "Bearer a b"])
def test_a_malformed_authorization_header_is_a_json_401_not_a_500(lab, client, header):
    r = client.get("/api/v1/me", HTTP_AUTHORIZATION=header)
    assert r.status_code == 401 and r.json()["error"]["code"] == "authentication_failed"
