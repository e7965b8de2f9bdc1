"""Single sign-on against a real OpenID provider (tests/portal/oidc_provider.py: authlib's authorization
server over HTTP, RS256 ID tokens, a real JWKS), through mozilla-django-oidc: nothing of the library is mocked."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from portal.models import AuditEntry, ExternalIdentity, Membership, SsoGroupMapping
from tests.portal.oidc_provider import Provider

pytestmark = pytest.mark.django_db

BACKENDS = ["portal.lockout.LoginThrottleBackend", "django.contrib.auth.backends.ModelBackend",
            "portal.sso.PortalOIDCBackend"]


@pytest.fixture
def provider():
    p = Provider().start()
    yield p
    p.stop()


@pytest.fixture
def sso(provider, settings):
    """SSO switched on against the provider, for a client that calls back to http://testserver."""
    settings.SSO_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = BACKENDS
    settings.OIDC_RP_CLIENT_ID = "portal"
    settings.OIDC_RP_CLIENT_SECRET = "s3cret-s3cret"
    settings.OIDC_GROUP_MAP = [{"group": "cv-lab", "department": "vision", "role": "researcher", "tier": "senior"},
                               {"group": "cv-leads", "department": "vision", "role": "department_admin",
                                "tier": "pi"}]
    for k, v in provider.settings().items():
        setattr(settings, k, v)
    provider.register("portal", "s3cret-s3cret", "http://testserver/oidc/callback/",
                      post_logout_redirect_uri="http://testserver/login/")
    return provider


def sign_in(client: Client, provider: Provider, **claims):
    """The browser's round trip: portal -> provider (which signs ``claims`` in) -> portal's callback."""
    provider.login_as(**claims)
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302 and start["Location"].startswith(provider.url)
    at_provider = requests.get(start["Location"], allow_redirects=False, timeout=10)
    assert at_provider.status_code == 302, at_provider.text
    back = urlparse(at_provider.headers["Location"])
    assert back.path == "/oidc/callback/" and "code" in parse_qs(back.query)
    return client.get(f"{back.path}?{back.query}")


def test_first_login_creates_the_account_and_the_membership_the_mapping_says(sso, lab):
    c = Client()
    r = sign_in(c, sso, sub="u-1", preferred_username="zoe", email="zoe@uni.example", groups=["cv-lab", "cv-leads"])
    assert r.status_code == 302 and r["Location"] == "/"
    zoe = get_user_model().objects.get(username="zoe")
    assert not zoe.has_usable_password() and zoe.email == "zoe@uni.example"
    m = Membership.objects.get(user=zoe)
    assert (m.department.slug, m.role, m.user_tier) == ("vision", "department_admin", "pi")  # the highest role
    entry = AuditEntry.objects.get(action="membership.add", object_id=str(m.pk))
    assert "single sign-on" in entry.comment and entry.actor is None
    assert c.get("/").status_code == 200  # signed in
    assert sso.issued_id_tokens  # an ID token really was signed and checked


def test_the_session_issues_api_tokens_that_keep_working(sso, lab):
    c = Client()
    sign_in(c, sso, sub="u-2", preferred_username="yan", email="yan@uni.example", groups=["cv-lab"])
    r = c.post("/api/v1/tokens", {"name": "notebook"}, content_type="application/json")
    assert r.status_code == 201
    token = r.json()["token"]
    me = Client().get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert me.status_code == 200 and me.json()["username"] == "yan"
    assert me.json()["membership"]["department"] == "vision"


def test_the_lab_file_mapping_is_used_too(sso, lab):
    from lab.services.labfile import apply_lab

    apply_lab("version: 1\nsso:\n  groups:\n    - {group: nlp-people, department: nlp, role: researcher}\n")
    assert SsoGroupMapping.objects.get().department == lab.nlp
    sign_in(Client(), sso, sub="u-3", preferred_username="xia", groups=["nlp-people"])
    assert Membership.objects.get(user__username="xia").department == lab.nlp


def test_later_logins_leave_the_membership_to_the_admins(sso, lab):
    c = Client()
    sign_in(c, sso, sub="u-4", preferred_username="wes", groups=["cv-leads"])
    Membership.objects.filter(user__username="wes").update(role="researcher")  # an admin changed it since
    c.logout()
    sign_in(c, sso, sub="u-4", preferred_username="wes", groups=["cv-leads"])
    assert Membership.objects.get(user__username="wes").role == "researcher"
    assert get_user_model().objects.filter(username="wes").count() == 1


def test_a_user_of_no_mapped_group_belongs_to_no_department(sso, lab):
    c = Client()
    sign_in(c, sso, sub="u-5", preferred_username="vic", groups=["somewhere-else"])
    assert get_user_model().objects.filter(username="vic").exists()
    assert not Membership.objects.filter(user__username="vic").exists()
    assert c.get("/api/v1/me").json()["membership"] is None
    assert c.get("/budgets/approvals/").status_code == 403


def test_a_local_account_with_a_password_is_never_taken_over(sso, lab):
    c = Client()
    r = sign_in(c, sso, sub="evil", preferred_username="root", groups=["cv-lab"])
    assert r.status_code == 302 and r["Location"] == "/"
    me = c.get("/api/v1/me").json()
    assert me["username"] == "root-2"  # a name of its own: the provider's name never picks the account
    assert Membership.objects.get(user=lab.root).role == "platform_admin"
    assert not ExternalIdentity.objects.filter(user=lab.root).exists()


def test_a_user_renamed_at_the_provider_signs_into_the_same_account(sso, lab):
    c = Client()
    sign_in(c, sso, sub="u-10", preferred_username="zoe", groups=["cv-lab"])
    zoe = get_user_model().objects.get(username="zoe")
    c.logout()
    sso.rename("zoe.smith")
    sign_in(c, sso, sub="u-10", preferred_username="zoe.smith", groups=["cv-lab"])
    assert c.get("/api/v1/me").json()["username"] == "zoe"
    identity = ExternalIdentity.objects.get(subject="u-10")
    assert identity.user == zoe and identity.preferred_username == "zoe.smith"  # the display name follows
    assert get_user_model().objects.filter(username__startswith="zoe").count() == 1


def test_another_subject_with_a_taken_username_gets_another_account(sso, lab):
    sign_in(Client(), sso, sub="u-11", preferred_username="zoe", groups=["cv-leads"])
    other = Client()
    sign_in(other, sso, sub="u-12", preferred_username="Zoe", groups=["cv-lab"])
    assert other.get("/api/v1/me").json()["username"] == "Zoe-2"  # names differing only in case collide too
    zoe = get_user_model().objects.get(username="zoe")
    assert ExternalIdentity.objects.get(subject="u-11").user == zoe
    assert ExternalIdentity.objects.get(subject="u-12").user != zoe
    assert Membership.objects.get(user=zoe).role == "department_admin"


def test_the_same_subject_at_another_issuer_is_another_identity(sso, lab, settings):
    c = Client()
    sign_in(c, sso, sub="shared-sub", preferred_username="yan", groups=["cv-lab"])
    c.logout()
    second = Provider().start()
    try:
        for k, v in second.settings().items():
            setattr(settings, k, v)
        second.register("portal", "s3cret-s3cret", "http://testserver/oidc/callback/")
        sign_in(c, second, sub="shared-sub", preferred_username="yan", groups=["cv-lab"])
    finally:
        second.stop()
    assert c.get("/api/v1/me").json()["username"] == "yan-2"
    pairs = {(i.issuer, i.user.username) for i in ExternalIdentity.objects.filter(subject="shared-sub")}
    assert pairs == {(sso.url, "yan"), (second.url, "yan-2")}


def test_an_id_token_of_another_issuer_signs_nobody_in(sso, lab, settings):
    settings.OIDC_OP_ISSUER = "https://idp.example"
    c = Client()
    r = sign_in(c, sso, sub="u-13", preferred_username="una", groups=["cv-lab"])
    assert r.status_code == 302 and "sso=failed" in r["Location"]
    assert not get_user_model().objects.filter(username="una").exists()


def test_userinfo_of_another_subject_than_the_id_token_signs_nobody_in(sso, lab):
    sso.userinfo_override = {"sub": "u-someone-else"}
    c = Client()
    r = sign_in(c, sso, sub="u-19", preferred_username="ada", groups=["cv-lab"])
    assert r.status_code == 302 and "sso=failed" in r["Location"]
    assert not ExternalIdentity.objects.exists() and not get_user_model().objects.filter(username="ada").exists()


def test_a_verified_email_links_the_account_an_admin_provisioned(sso, lab):
    from lab.services import members

    members.member_add(department=lab.vision, actor=lab.root, username="zoe", email="Zoe@uni.example")
    zoe = get_user_model().objects.get(username="zoe")
    c = Client()
    sign_in(c, sso, sub="u-14", preferred_username="zsmith", email="zoe@uni.example", email_verified=True,
            groups=["cv-leads"])
    assert c.get("/api/v1/me").json()["username"] == "zoe"
    assert ExternalIdentity.objects.get(subject="u-14").user == zoe
    assert Membership.objects.get(user=zoe).role == "researcher"  # the admin's membership, not the group map's
    assert "verified" in AuditEntry.objects.get(action="sso_identity.link").comment
    # the account is linked now: another subject with the same verified address gets an account of its own
    other = Client()
    sign_in(other, sso, sub="u-15", preferred_username="zoe", email="zoe@uni.example", email_verified=True)
    assert other.get("/api/v1/me").json()["username"] == "zoe-2"


def test_an_unverified_email_or_a_password_account_is_never_linked(sso, lab):
    from lab.services import members

    members.member_add(department=lab.vision, actor=lab.root, username="zoe", email="zoe@uni.example")
    c = Client()
    sign_in(c, sso, sub="u-16", preferred_username="zoe", email="zoe@uni.example", email_verified=False)
    assert c.get("/api/v1/me").json()["username"] == "zoe-2"
    c.logout()
    sign_in(c, sso, sub="u-17", preferred_username="boss", email="root@x.test", email_verified=True)
    assert c.get("/api/v1/me").json()["username"] == "boss"  # root has a password: never linked
    assert not ExternalIdentity.objects.filter(user=lab.root).exists()


class Clock:
    """The clock of mozilla-django-oidc's session refresh (its views and middleware read ``time.time()``)."""

    def __init__(self, now: float):
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch, settings):
    from mozilla_django_oidc import middleware, views

    settings.OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = 900
    c = Clock(1_000_000.0)
    monkeypatch.setattr(middleware, "time", c)
    monkeypatch.setattr(views, "time", c)
    return c


def follow_refresh(client: Client, response):
    """The browser follows the silent re-check: portal -> provider (prompt=none) -> portal's callback."""
    assert response.status_code == 302
    assert parse_qs(urlparse(response["Location"]).query)["prompt"] == ["none"]
    at_provider = requests.get(response["Location"], allow_redirects=False, timeout=10)
    assert at_provider.status_code == 302, at_provider.text
    back = urlparse(at_provider.headers["Location"])
    assert back.path == "/oidc/callback/"
    return client.get(f"{back.path}?{back.query}"), parse_qs(back.query)


def test_a_user_disabled_at_the_provider_loses_the_session_after_the_refresh_interval(sso, lab, clock):
    c = Client()
    sign_in(c, sso, sub="u-20", preferred_username="vic", groups=["cv-lab"])
    sso.disable("u-20")
    clock.now += 899
    assert c.get("/").status_code == 200  # within the interval the session is not re-checked
    clock.now += 2
    back, params = follow_refresh(c, c.get("/"))
    assert params["error"] == ["login_required"]
    assert back.status_code == 302 and "sso=failed" in back["Location"]
    assert c.get("/api/v1/me").status_code in (401, 403)
    assert c.get("/")["Location"].startswith("/login/")


def test_a_user_still_signed_in_at_the_provider_keeps_the_session(sso, lab, clock):
    c = Client()
    sign_in(c, sso, sub="u-21", preferred_username="wes", groups=["cv-lab"])
    tokens = len(sso.issued_id_tokens)
    clock.now += 901
    sso.rename("wes.w")
    back, params = follow_refresh(c, c.get("/jobs/"))
    assert "code" in params and back.status_code == 302 and back["Location"] == "/jobs/"
    assert len(sso.issued_id_tokens) == tokens + 1  # a new ID token really was issued and checked
    assert c.get("/api/v1/me").json()["username"] == "wes"
    assert ExternalIdentity.objects.get(subject="u-21").preferred_username == "wes.w"
    clock.now += 899
    assert c.get("/").status_code == 200  # renewed for another interval


def test_local_sessions_are_never_sent_to_the_provider(sso, lab, clock):
    c = Client()
    c.post("/login/", {"username": "alice", "password": "pw-alice-long-enough"})
    clock.now += 10_000
    assert c.get("/").status_code == 200


def test_logging_out_logs_out_of_the_provider(sso, lab):
    c = Client()
    sign_in(c, sso, sub="u-22", preferred_username="tia", groups=["cv-lab"])
    r = c.post("/logout/")
    assert r.status_code == 302 and r["Location"].startswith(f"{sso.url}/end_session?")
    params = parse_qs(urlparse(r["Location"]).query)
    assert params["id_token_hint"] == [sso.issued_id_tokens[-1]]
    assert params["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert c.get("/api/v1/me").status_code in (401, 403)  # the portal's session ended first
    at_provider = requests.get(r["Location"], allow_redirects=False, timeout=10)
    assert at_provider.status_code == 302 and at_provider.headers["Location"] == "http://testserver/login/"
    assert len(sso.logouts) == 1 and sso.signed_in is None  # the provider's session ended too


def test_a_local_account_logs_out_of_the_portal_only(sso, lab):
    c = Client()
    c.post("/login/", {"username": "alice", "password": "pw-alice-long-enough"})
    r = c.post("/logout/")
    assert r.status_code == 302 and r["Location"] == "/login/"
    assert c.get("/api/v1/me").status_code in (401, 403) and not sso.logouts


def test_without_an_end_session_endpoint_logout_stays_local(sso, lab, settings):
    settings.OIDC_OP_LOGOUT_ENDPOINT = ""
    c = Client()
    sign_in(c, sso, sub="u-23", preferred_username="sal", groups=["cv-lab"])
    r = c.post("/logout/")
    assert r.status_code == 302 and r["Location"] == "/login/"


def test_a_wrong_client_secret_signs_nobody_in(sso, lab, settings):
    settings.OIDC_RP_CLIENT_SECRET = "not-the-secret"
    c = Client()
    r = sign_in(c, sso, sub="u-6", preferred_username="una", groups=["cv-lab"])
    assert r.status_code == 302 and "sso=failed" in r["Location"]
    assert not get_user_model().objects.filter(username="una").exists()


def test_an_id_token_the_published_keys_do_not_verify_signs_nobody_in(sso, lab):
    from joserfc.jwk import RSAKey

    sso.published_key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
    c = Client()
    r = sign_in(c, sso, sub="u-7", preferred_username="tom", groups=["cv-lab"])
    assert r.status_code == 302 and "sso=failed" in r["Location"]
    assert not get_user_model().objects.filter(username="tom").exists()


def test_local_accounts_keep_working_beside_sso(sso, lab):
    c = Client()
    page = c.get("/login/")
    assert b'id="sso-login"' in page.content
    r = c.post("/login/", {"username": "alice", "password": "pw-alice-long-enough"})
    assert r.status_code == 302 and c.get("/").status_code == 200


def test_sso_is_off_unless_configured(lab):
    c = Client()
    assert c.get("/oidc/authenticate/").status_code == 404
    assert c.get("/oidc/callback/?code=x&state=y").status_code == 404
    assert b"sso-login" not in c.get("/login/").content


def test_a_half_configuration_is_refused_at_start_up():
    from portal import config

    with pytest.raises(config.ConfigError) as exc:
        config.load({"OIDC_RP_CLIENT_ID": "portal", "OIDC_OP_TOKEN_ENDPOINT": "https://idp.example/token"})
    assert "OIDC_OP_AUTHORIZATION_ENDPOINT" in str(exc.value) and "OIDC_OP_JWKS_ENDPOINT" in str(exc.value)
    assert "OIDC_OP_ISSUER" in str(exc.value)  # without it, ID tokens of any issuer would be taken
    with pytest.raises(config.ConfigError) as exc:
        config.load({"OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": "0"})
    assert "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS must be positive" in str(exc.value)
    with pytest.raises(config.ConfigError) as exc:
        config.load({"OIDC_GROUP_MAP": '[{"group": "g", "department": "vision", "role": "boss"}]'})
    assert "OIDC_GROUP_MAP[0].role" in str(exc.value)
    assert config.load({})["OIDC_RP_CLIENT_ID"] == ""  # off by default


def test_the_pages_let_the_log_out_form_go_on_to_the_provider_only(sso, lab, settings):
    c = Client()
    sign_in(c, sso, sub="u-24", preferred_username="ian", groups=["cv-lab"])
    policy = c.get("/")["Content-Security-Policy"]
    assert f"form-action 'self' {sso.url};" in policy  # else a browser blocks the redirect to end-session
    settings.OIDC_OP_LOGOUT_ENDPOINT = ""
    assert "form-action 'self';" in c.get("/")["Content-Security-Policy"]
