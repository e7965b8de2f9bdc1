"""Credits as pages show and take them, mcr as everything behind a page keeps them (portal/money.py), and the
job form's bid, which goes through the same conversion as the budget forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from portal.money import CreditsError, credits_value, format_credits, parse_credits
from scheduling.models import Job
from tests.pages import without_tokens


@pytest.mark.parametrize(("mcr", "shown", "field"), [
    (0, "0.000 cr", "0"),
    (1, "0.001 cr", "0.001"),
    (12_500, "12.500 cr", "12.5"),
    (12_000, "12.000 cr", "12"),
    (1_234_567, "1,234.567 cr", "1234.567"),
    (-1_500, "-1.500 cr", "-1.5"),
    (None, "—", ""),
])
def test_an_amount_is_shown_and_prefilled_in_credits(mcr, shown, field):
    assert format_credits(mcr) == shown
    assert credits_value(mcr) == field


@pytest.mark.parametrize(("typed", "mcr"), [
    ("12.5", 12_500), ("12.500", 12_500), ("0.001", 1), (".5", 500), ("5.", 5000), ("+3", 3000), (" 7 ", 7000),
    ("0", 0), ("-0", 0), ("1000000", 1_000_000_000),
])
def test_what_a_person_types_becomes_exact_mcr(typed, mcr):
    assert parse_credits(typed, max_mcr=10**15) == mcr


@pytest.mark.parametrize(("typed", "kwargs", "message"), [
    ("abc", {}, "Enter an amount in credits, e.g. 12.5."),
    ("", {}, "Enter an amount in credits, e.g. 12.5."),
    (".", {}, "Enter an amount in credits, e.g. 12.5."),
    ("1e3", {}, "Enter an amount in credits, e.g. 12.5."),
    ("inf", {}, "Enter an amount in credits, e.g. 12.5."),
    ("1,5", {}, "Enter an amount in credits, e.g. 12.5."),
    ("１２", {}, "Enter an amount in credits, e.g. 12.5."),  # only ASCII digits
    ("1.2345", {}, "Use at most 3 decimals: 0.001 credits is the smallest amount."),
    ("-1", {}, "Enter 0 or more credits."),
    ("-1", {"negative_message": "Choose debit."}, "Choose debit."),
    ("-2000", {"min_mcr": -(10**6)}, "Enter at least -1,000 credits."),
    ("1000.001", {"max_mcr": 10**6}, "Too large: enter at most 1,000 credits."),
    ("9" * 5000, {"max_mcr": 10**6}, "Too large: enter at most 1,000 credits."),  # no int() digit-limit error
    ("9" * 5000, {}, "Too large: enter a smaller amount."),
])
def test_what_is_not_an_amount_of_credits_is_refused_in_credits(typed, kwargs, message):
    with pytest.raises(CreditsError) as exc:
        parse_credits(typed, **kwargs)
    assert str(exc.value) == message


def test_a_negative_amount_is_taken_where_the_field_allows_it():
    assert parse_credits("-2.5", min_mcr=-(10**6)) == -2500
    assert parse_credits("-2.5", min_mcr=None) == -2500


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_every_amount_round_trips_through_its_field(mcr):
    assert parse_credits(credits_value(mcr), min_mcr=None) == mcr
    shown = format_credits(mcr)
    assert shown.endswith(" cr") and parse_credits(shown[:-3].replace(",", ""), min_mcr=None) == mcr


# ------------------------------------------------------------------------------------------ the job form's bid

JOB_FORM = {"name": "bidder", "image": "pytorch/pytorch:2.3", "command": "python t.py", "flavor": "a100-80gb",
            "gpus": "1", "max_runtime_s": "3600"}


@pytest.mark.django_db
@pytest.mark.parametrize(("bid", "message"), [
    ("cheap", "Enter an amount in credits, e.g. 12.5."),
    ("1e2", "Enter an amount in credits, e.g. 12.5."),
    ("2.5005", "Use at most 3 decimals: 0.001 credits is the smallest amount."),
    ("-1", "Enter 0 or more credits."),
    ("1000000.001", "Too large: enter at most 1,000,000 credits."),  # the API's maximum bid, 10**9 mcr
])
@pytest.mark.parametrize("url", ["/jobs/new", "/jobs/new/quote"])
def test_the_bid_is_refused_in_credits_on_the_form_and_its_quote(lab, client, bid, message, url):
    client.force_login(lab.alice)
    r = client.post(url, {**JOB_FORM, "bid": bid})
    assert r.status_code == 400
    html = without_tokens(r.content.decode())
    assert message in html and "mcr" not in html and "milli" not in html
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_bid_round_trips_in_credits(lab, client):
    client.force_login(lab.alice)
    assert 'step="0.001"' in client.get("/jobs/new").content.decode()
    r = client.post("/jobs/new", {**JOB_FORM, "bid": "1000000"})
    assert r.status_code == 302
    job = Job.objects.get()
    assert job.bid == 10**9
    assert "1,000,000.000 cr per GPU-hour" in client.get(f"/jobs/{job.pk}/").content.decode()
    refused = client.post("/jobs/new", {**JOB_FORM, "name": "", "bid": "2.345"})
    assert refused.status_code == 400 and 'value="2.345"' in refused.content.decode()
