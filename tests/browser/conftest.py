"""Debian's Chromium through Playwright, shared by the browser tests: skipped on a laptop without Chromium,
required in CI."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser():
    if CHROMIUM is None:
        if IN_CI:
            pytest.fail("CI needs Debian's chromium for the browser tests")
        pytest.skip("no chromium on this machine")
    playwright = pytest.importorskip("playwright.sync_api")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs an event loop in this thread
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def login(browser, live_server):
    """login(username, viewport=None) -> a page signed in as the user (the lab's password convention)."""

    def make(username: str, viewport: dict | None = None):
        page = browser.new_page(viewport=viewport or {"width": 1280, "height": 900})
        page.set_default_timeout(15_000)
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", f"pw-{username}-long-enough")
        page.click("button[type=submit]")
        page.wait_for_selector("h1:has-text('Home')")
        return page

    return make
