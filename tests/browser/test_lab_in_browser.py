"""The Lab pages in Debian's Chromium: inviting a member without single sign-on (the e-mailed link sets a
password and signs in, once), and the quota form opening with the quota in force."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_department_admin_invites_a_member_who_sets_a_password_from_the_link(login, browser, live_server, lab):
    from django.core import mail
    from playwright.sync_api import expect

    page = login("vadmin")
    page.goto(f"{live_server.url}/lab/departments/vision/")
    expect(page.locator("#invitation-note")).to_contain_text("e-mailed an invitation")
    page.fill("input[name=username]", "zoe")
    page.fill("input[name=email]", "not-an-address")
    page.click("button:has-text('Add member')")
    expect(page.locator("[data-error-for=email]")).to_contain_text("valid email")
    page.fill("input[name=email]", "zoe@uni.example")
    page.click("button:has-text('Add member')")
    expect(page.locator("body")).to_contain_text("zoe added to vision as Researcher and invited by e-mail")
    row = page.locator("tr[data-member=zoe]")
    expect(row.locator("[data-invitation]")).to_contain_text("not yet signed in")
    expect(row.get_by_role("button", name="Resend the invitation to zoe")).to_have_text("Resend invitation")
    assert [m.to for m in mail.outbox] == [["zoe@uni.example"]]  # sent once the addition committed
    link = re.search(r"https?://\S+?(/accounts/set-password/\S+/)", mail.outbox[0].body).group(1)

    zoe = browser.new_page()  # zoe's own browser: not signed in
    zoe.set_default_timeout(15_000)
    zoe.goto(f"{live_server.url}{link}")
    expect(zoe.locator("h1")).to_have_text("Choose your password")
    assert "/choose/" in zoe.url  # the token left the address bar
    zoe.fill("input[name=new_password1]", "zoe-chooses-a-long-one")
    zoe.fill("input[name=new_password2]", "zoe-chooses-a-long-one")
    zoe.click("button:has-text('Set my password')")
    zoe.wait_for_selector("h1:has-text('Home')")
    expect(zoe.locator("body")).to_contain_text("Your password is set, and you are signed in.")
    zoe.goto(f"{live_server.url}{link}")  # used: refused
    expect(zoe.locator("#link-refused")).to_be_visible()

    page.reload()
    expect(page.locator("tr[data-member=zoe] [data-invitation]")).to_have_count(0)  # signed in now


def test_the_general_quota_button_opens_the_form_with_the_quota_in_force(login, live_server, lab):
    from playwright.sync_api import expect

    from quotas.models import Quota

    Quota.objects.filter(department=lab.vision).update(nominal=4, borrowing_limit=2, lending_limit=4)
    Quota.objects.filter(department=lab.nlp).update(nominal=2)  # room for vision's 5
    page = login("vadmin")
    page.goto(f"{live_server.url}/lab/departments/vision/")
    page.click("a.button:has-text('Request a quota change')")
    form = page.locator("#quota-form form")
    expect(form.locator("select[name=flavor]")).to_have_value("a100-80gb")
    expect(form.locator("input[name=nominal]")).to_have_value("4")
    expect(form.locator("input[name=borrowing_limit]")).to_have_value("2")
    expect(form.locator("input[name=lending_limit]")).to_have_value("4")
    expect(form.locator("input[name=lending_all]")).not_to_be_checked()
    form.locator("select[name=flavor]").select_option("a100-mig-3g.40gb")  # no quota there: every limit to choose
    expect(form.locator("input[name=nominal]")).to_have_value("")
    expect(form.locator("input[name=lending_limit]")).to_have_value("")
    form.locator("select[name=flavor]").select_option("a100-80gb")
    expect(form.locator("input[name=lending_limit]")).to_have_value("4")
    form.locator("input[name=lending_limit]").fill("")  # a blank is not "lend all"
    form.locator("input[name=nominal]").fill("5")
    form.locator("input[name=reason]").fill("one more GPU")
    form.locator("button[type=submit]").click()
    expect(page.locator("[data-error-for=lending_limit]")).to_contain_text("lend all")
    form.locator("input[name=lending_all]").check()
    form.locator("button[type=submit]").click()
    expect(page.locator("body")).to_contain_text("filed: a platform admin decides it")


def test_the_quota_form_says_what_the_others_hold_of_the_flavor_chosen_and_refuses_more(login, live_server, lab):
    from playwright.sync_api import expect

    from quotas.models import QuotaChangeRequest

    page = login("vadmin")
    page.goto(f"{live_server.url}/lab/departments/vision/quota")
    room = page.locator("#quota-room")
    # nlp holds 4 of the 8 a100s; nobody holds the MIG flavor, which has no GPUs installed
    expect(room).to_have_text("The other departments' nominal quotas here come to 4 of 8 installed GPUs: 4 left "
                              "to ask for without oversubscribing.")
    page.select_option("#quota-form select[name=flavor]", "a100-mig-3g.40gb")
    expect(room).to_contain_text("come to 0 of 0 installed GPUs: 0 left to ask for")
    page.select_option("#quota-form select[name=flavor]", "a100-80gb")
    page.fill("#quota-form input[name=nominal]", "5")
    page.fill("#quota-form input[name=reason]", "more")
    page.click("#quota-form button[type=submit]")
    expect(page.locator("[data-error-for=nominal]")).to_contain_text("ask for at most 4, or ask to oversubscribe")
    assert not QuotaChangeRequest.objects.exists()
