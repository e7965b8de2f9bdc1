"""What a person notices first: error pages that say why, one unit of credits, honest empty states, a
favicon, a token page, API docs grouped by resource, the demo's address argument."""

from __future__ import annotations

import logging

import pytest

from portal.models import ApiToken
from scheduling.models import Job
from tests.pages import without_tokens

pytestmark = pytest.mark.django_db


def test_403_and_404_pages_are_styled_and_give_the_reason(lab, submit, client, caplog):
    job = submit(lab.alice)
    client.force_login(lab.amy)  # same department, not the owner: may see, not cancel
    with caplog.at_level(logging.WARNING, logger="django.request"):
        r = client.post(f"/jobs/{job.pk}/cancel")
    assert r.status_code == 403
    html = r.content.decode()
    assert 'id="error-page"' in html and "app.css" in html and "Traceback" not in html
    assert "owner" in html  # the reason from the Forbidden message
    client.force_login(lab.bob)
    r = client.get(f"/jobs/{job.pk}/")
    assert r.status_code == 404 and 'data-status="404"' in r.content.decode()
    r = client.get("/no/such/page/")
    assert r.status_code == 404 and "There is no page at /no/such/page/" in r.content.decode()


def test_refused_requests_are_logged_without_a_traceback():
    from portal.middleware import ClientErrorsWithoutTraceback

    try:
        raise PermissionError("x")
    except PermissionError:
        import sys

        exc = sys.exc_info()
    record = logging.LogRecord("django.request", logging.WARNING, __file__, 1, "Forbidden", (), exc)
    record.status_code = 403
    assert ClientErrorsWithoutTraceback().filter(record) and record.exc_info is None
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Error", (), exc)
    record.status_code = 500
    assert ClientErrorsWithoutTraceback().filter(record) and record.exc_info is not None


def test_the_500_page_is_styled_and_says_nothing_technical(client):
    from django.template.loader import render_to_string

    html = render_to_string("500.html")
    assert "Something went wrong" in html and "app.css" in html and "Traceback" not in html


def test_credits_everywhere_and_the_bid_in_credits(lab, client):
    client.force_login(lab.alice)
    r = client.post("/jobs/new", {"name": "bidder", "image": "pytorch/pytorch:2.3", "command": "python t.py",
                                  "flavor": "a100-80gb", "gpus": "1", "bid": "2.5", "max_runtime_s": "3600"})
    assert r.status_code == 302
    job = Job.objects.get(name="bidder")
    assert job.bid == 2500  # milli-credits in the API and the database
    html = without_tokens(client.get(f"/jobs/{job.pk}/").content.decode())
    assert "2.500 cr per GPU-hour" in html and "mcr" not in html
    bad = client.post("/jobs/new", {"name": "b2", "image": "pytorch/pytorch:2.3", "command": "python t.py",
                                    "flavor": "a100-80gb", "gpus": "1", "bid": "0.0001"})
    assert bad.status_code == 400 and "at most 3 decimals" in bad.content.decode()
    assert "mcr" not in without_tokens(client.get("/jobs/new").content.decode())


def test_empty_states_tell_a_filter_from_no_jobs(lab, submit, client):
    client.force_login(lab.alice)
    assert "No jobs yet" in client.get("/jobs/").content.decode()
    submit(lab.alice)
    html = client.get("/jobs/?state=failed").content.decode()
    assert "No jobs match this filter" in html and "No jobs yet" not in html


def test_favicon_and_narrow_layout(lab, client):
    client.force_login(lab.alice)
    assert 'rel="icon"' in client.get("/").content.decode()
    assert client.get("/static/portal/favicon.svg").status_code == 200
    assert client.get("/favicon.ico").status_code == 301
    css = b"".join(client.get("/static/portal/app.css").streaming_content).decode()
    assert "@media (max-width: 700px)" in css and "overflow-x:auto" in css


def test_token_page_creates_shows_once_lists_and_revokes(lab, client):
    client.force_login(lab.alice)
    r = client.post("/tokens/", {"name": "laptop", "ttl_days": "30"})
    assert r.status_code == 302  # post/redirect/get: a reload never creates a second token
    html = client.get("/tokens/").content.decode()
    token = ApiToken.objects.get(user=lab.alice, name="laptop")
    secret = html.split('id="token-secret">')[1].split("<")[0]
    assert secret.startswith(f"gpp_{token.key_id}_") and ApiToken.authenticate(secret) == token
    assert 28 <= (token.expires_at - token.created_at).days <= 30
    again = client.get("/tokens/").content.decode()
    assert secret not in again and "laptop" in again and "never" in again  # shown once; not used yet
    assert client.post("/tokens/", {"name": "", "ttl_days": "999"}).status_code == 400
    other, _ = ApiToken.issue(user=lab.bob, name="bobs")
    assert client.post(f"/tokens/{other.pk}/revoke").status_code == 404
    assert client.post(f"/tokens/{token.pk}/revoke").status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None and ApiToken.authenticate(secret) is None
    assert "bobs" not in client.get("/tokens/").content.decode()


def test_api_docs_group_operations_by_resource(client, lab):
    import yaml

    client.force_login(lab.alice)
    schema = yaml.safe_load(client.get("/api/schema/").content)
    tags = {t for path in schema["paths"].values() for op in path.values() if isinstance(op, dict)
            for t in op.get("tags", [])}
    assert "v1" not in tags and {"jobs", "wallets", "tokens", "cluster"} <= tags
    assert schema["paths"]["/api/v1/jobs/quote/"]["post"]["tags"] == ["jobs"]


def test_demo_documents_its_address_argument():
    from django.core.management import load_command_class

    parser = load_command_class("lab", "demo").create_parser("manage.py", "demo")
    text = parser.format_help()
    assert "ADDRPORT" in text and "127.0.0.1:8000" in text


def test_every_destructive_form_asks_first():
    """A form that deletes, removes, revokes, cancels or decides carries data-confirm (portal/app.js asks),
    unless it is a confirmation page itself (a "confirm" checkbox the service requires, as archiving has)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    destructive = re.compile(r"delete|remove|revoke|cancel|reject|approve", re.I)
    unasked = []
    for template in sorted(root.glob("*/templates/**/*.html")):
        html = template.read_text()
        for form in re.finditer(r"<form\b([^>]*)>(.*?)</form>", html, re.S):
            attrs, body = form.groups()
            action = re.search(r'action="([^"]*)"', attrs)
            if ((action and destructive.search(action.group(1))) or 'class="danger"' in body) \
                    and "data-confirm" not in attrs and 'name="confirm"' not in body:
                unasked.append(f"{template.relative_to(root)}: {attrs.strip()[:80]}")
    assert unasked == []
