"""A browser signs in through the OpenID provider: the log-in page's button, the provider, the callback, the
dashboard; and logs out of both. Debian's Chromium through Playwright, like the other browser test (skipped without Chromium on a
laptop, required in CI)."""

from __future__ import annotations

import pytest

from tests.browser.test_submit_in_browser import page  # noqa: F401 - the Chromium page fixture
from tests.portal.oidc_provider import Provider
from tests.portal.test_sso import BACKENDS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_researcher_signs_in_with_single_sign_on(page, live_server, lab, settings):  # noqa: F811
    provider = Provider().start()
    try:
        settings.SSO_ENABLED = True
        settings.AUTHENTICATION_BACKENDS = BACKENDS
        settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = "portal", "browser-secret"
        settings.OIDC_GROUP_MAP = [{"group": "cv-lab", "department": "vision", "role": "researcher"}]
        settings.OIDC_LOGIN_LABEL = "university account"
        for k, v in provider.settings().items():
            setattr(settings, k, v)
        provider.register("portal", "browser-secret", f"{live_server.url}/oidc/callback/",
                          post_logout_redirect_uri=f"{live_server.url}/login/")
        provider.login_as(sub="b-1", preferred_username="zoe", email="zoe@uni.example", groups=["cv-lab"])

        page.goto(f"{live_server.url}/")
        page.click("text=Log in with your university account")
        page.wait_for_selector("h1:has-text('Home')")
        assert "zoe" in page.inner_text("header .who") and "vision" in page.inner_text("header .who")
        assert provider.issued_id_tokens

        page.click("header .who button:has-text('Log out')")  # out of the portal, then of the provider
        page.wait_for_selector("#sso-login")
        assert page.url == f"{live_server.url}/login/"
        assert len(provider.logouts) == 1 and provider.signed_in is None
    finally:
        provider.stop()
