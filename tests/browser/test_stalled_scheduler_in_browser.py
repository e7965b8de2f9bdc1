"""A platform admin sees, in the browser, that the scheduler has stalled: the shell's banner, on every page."""

from __future__ import annotations

import re
import time

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_stalled_scheduler_shows_a_banner_to_platform_admins(login, lab, settings):
    from portal import metrics
    from portal.models import MetricValue
    from scheduling.services.cycle import run_cycle

    settings.CYCLE_STALE_AFTER_S = 120
    run_cycle()
    MetricValue.objects.filter(name=metrics.CYCLE_LAST_RUN).update(value=time.time() - 900)

    page = login("root")
    banner = page.locator("#scheduler-stalled")
    assert banner.is_visible()
    text = banner.inner_text()
    assert text.startswith("The scheduler has stalled: last admission cycle ")
    assert 900 <= int(re.search(r"cycle (\d+) s ago", text).group(1)) < 900 + 300  # a slow browser start
    page.click("nav a:has-text('Jobs')")
    page.wait_for_selector("h1:has-text('Jobs')")
    assert page.locator("#scheduler-stalled").is_visible()

    assert login("alice").locator("#scheduler-stalled").count() == 0  # a researcher cannot act on it

    run_cycle()  # the worker is back
    page.reload()
    assert page.locator("#scheduler-stalled").count() == 0
