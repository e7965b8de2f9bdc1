"""The layout at a laptop's 1,400 px, in Debian's Chromium: the home page's quota table fits its card, the
admins' navigation stays on one line; and the submit form shows the fields of the kind chosen (batch job,
session, endpoint) only, the others hidden and not submitted."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDE = {"width": 1400, "height": 900}


def _clipped(page, selector: str) -> list[str]:
    """Descendants of ``selector`` that stick out of it or are cut by it (scrollWidth > clientWidth)."""
    return page.evaluate("""(sel) => {
        const out = [];
        for (const box of document.querySelectorAll(sel)) {
            const r = box.getBoundingClientRect();
            for (const el of [box, ...box.querySelectorAll("*")]) {
                if (getComputedStyle(el).overflowX !== "visible" && el.scrollWidth > el.clientWidth + 1)
                    out.push((el.id || el.className || el.tagName) + " scrolls " + el.scrollWidth + ">" + el.clientWidth);
            }
            for (const el of box.querySelectorAll("table, th, td")) {
                const e = el.getBoundingClientRect();
                if (e.right > r.right + 1) out.push(el.tagName + " ends at " + Math.round(e.right) + " > " + Math.round(r.right));
            }
        }
        return out;
    }""", selector)


def _lines(page, selector: str) -> int:
    """How many lines the items of a flex/inline list take (distinct tops)."""
    return page.evaluate("""(sel) => new Set([...document.querySelectorAll(sel)]
        .filter((el) => el.offsetParent !== null).map((el) => Math.round(el.getBoundingClientRect().top))).size""",
                         selector)


@pytest.mark.parametrize("who", ["alice", "root", "vadmin"])
def test_at_1400_px_the_quota_table_fits_and_the_navigation_is_one_line(login, lab, who):
    page = login(who, viewport=WIDE)
    assert _clipped(page, "#quota") == []  # no column cut off, nothing to scroll sideways
    assert _lines(page, "header nav > a, header nav > details > summary") == 1, page.inner_text("header nav")
    header = page.evaluate("document.querySelector('header.top').getBoundingClientRect().height")
    assert header < 60  # one line: the brand, the links and who is signed in


def test_the_admin_menu_opens_over_the_page_and_leads_to_each_admin_page(login, lab):
    page = login("root", viewport=WIDE)
    assert not page.locator("#admin-menu a:has-text('Prices')").is_visible()
    page.click("#admin-menu summary")
    for name in ("Budgets", "Approvals", "Allowances", "Prices", "Lab", "What-if"):
        assert page.locator(f"#admin-menu a:has-text('{name}')").is_visible(), name
    page.click("#admin-menu a:has-text('Lab')")
    page.wait_for_url("**/lab/")
    assert login("alice", viewport=WIDE).locator("#admin-menu").count() == 0  # a researcher has no admin pages


def _kind(page, kind: str) -> None:
    page.select_option("select[name=kind]", kind)


def _visible(page, name: str) -> bool:
    return page.locator(f"[name={name}]").is_visible()


def test_the_submit_form_shows_only_the_chosen_kinds_fields(login, lab):
    page = login("bob", viewport=WIDE)
    page.goto(page.url.rstrip("/") + "/jobs/new")
    # a batch job: no session image, port or readiness path; pods, arrays and retries are its own
    assert [_visible(page, n) for n in ("session_image", "port", "readiness_path")] == [False] * 3
    assert all(_visible(page, n) for n in ("pods", "array", "max_retries", "retry_on_exit_codes"))
    _kind(page, "session")
    assert all(_visible(page, n) for n in ("session_image", "port", "readiness_path"))
    assert not any(_visible(page, n) for n in ("pods", "array", "max_retries"))
    _kind(page, "service")
    assert [_visible(page, n) for n in ("session_image", "port", "readiness_path", "pods")] == [
        False, True, True, False]
    _kind(page, "batch")
    assert not _visible(page, "port") and _visible(page, "pods")


def test_fields_of_another_kind_are_not_submitted(login, lab):
    from scheduling.models import Job

    page = login("bob", viewport=WIDE)
    page.goto(page.url.rstrip("/") + "/jobs/new")
    _kind(page, "service")
    page.fill("input[name=port]", "8080")  # typed for a service, then the batch kind chosen after all
    _kind(page, "batch")
    page.fill("input[name=name]", "batch-after-all")
    page.fill("input[name=image]", "nvcr.io/nvidia/pytorch:24.05-py3")
    page.fill("textarea[name=command]", "python train.py")
    page.click("form[data-quote-url] button[type=submit]:has-text('Submit')")
    page.wait_for_selector("h1:not(:has-text('Submit a job'))")
    job = Job.objects.get(name="batch-after-all")  # accepted: the hidden port was not sent ("only sessions...")
    assert (job.kind, job.port) == ("batch", None)
