"""Single sign-on against a real OpenID provider (tests/portal/oidc_provider.py: authlib's authorization
server over HTTP, RS256 ID tokens, a real JWKS), through mozilla-django-oidc: nothing of the library is mocked."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from portal.models import AuditEntry, Membership, SsoGroupMapping
from tests.portal.oidc_provider import Provider

pytestmark = pytest.mark.django_db

BACKENDS = ["portal.lockout.VerifyFirstAxesBackend", "django.contrib.auth.backends.ModelBackend",
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
    provider.register("portal", "s3cret-s3cret", "http://testserver/oidc/callback/")
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
    assert r.status_code == 302 and "sso=failed" in r["Location"]
    assert c.get("/api/v1/me").status_code in (401, 403)
    assert Membership.objects.get(user=lab.root).role == "platform_admin"


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
    with pytest.raises(config.ConfigError) as exc:
        config.load({"OIDC_GROUP_MAP": '[{"group": "g", "department": "vision", "role": "boss"}]'})
    assert "OIDC_GROUP_MAP[0].role" in str(exc.value)
    assert config.load({})["OIDC_RP_CLIENT_ID"] == ""  # off by default
