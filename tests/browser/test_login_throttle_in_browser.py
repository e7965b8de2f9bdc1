"""The owner of an account that a guesser has locked still signs in from the browser they signed in with
before (its device cookie), in Debian's Chromium; the guesser's browser, right password and all, is told that
sign-in is paused and for how long."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIMIT = 3


def _sign_in(page, url, username, password):
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_the_owner_signs_in_from_a_known_browser_while_a_guesser_is_paused(browser, live_server, lab, settings):
    settings.AXES_FAILURE_LIMIT = LIMIT
    url = live_server.url
    owner = browser.new_context()
    page = owner.new_page()
    page.set_default_timeout(15_000)
    _sign_in(page, url, "alice", "pw-alice-long-enough")
    page.wait_for_selector("h1:has-text('Home')")
    owner.clear_cookies(name=settings.SESSION_COOKIE_NAME)  # signed out; the device cookie stays

    guesser = browser.new_context().new_page()  # another browser (on the same address, as it happens)
    guesser.set_default_timeout(15_000)
    for _ in range(LIMIT):
        _sign_in(guesser, url, "alice", "not-her-password")
    _sign_in(guesser, url, "alice", "pw-alice-long-enough")  # the right guess comes too late
    paused = guesser.locator("#sign-in-paused")
    assert "Sign-in is paused for 15 minutes" in paused.inner_text()
    assert guesser.locator("h1").inner_text() == "Log in"

    _sign_in(page, url, "alice", "pw-alice-long-enough")
    page.wait_for_selector("h1:has-text('Home')")
    owner.close()
