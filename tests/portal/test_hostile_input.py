"""Hostile input gets the documented JSON error (400), never a 500 or an HTML page."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from portal.api import MAX_JSON_KEYS
from portal.api.serializers import MAX_BODY_FIELDS, UNKNOWN_FIELDS_LISTED

pytestmark = pytest.mark.django_db


def _json_error(r, status=400):
    assert r.status_code == status, (r.status_code, r.content[:300])
    assert r["Content-Type"].startswith("application/json"), r["Content-Type"]
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] and body["error"]["message"]
    return body["error"]


@pytest.fixture
def api(lab):
    c = Client(raise_request_exception=False)
    c.force_login(lab.root)
    return c


@pytest.mark.parametrize("url", [
    "/api/v1/jobs?state=queued\x00",
    "/api/v1/jobs?q=%00",
    "/api/v1/jobs?department=vi%00sion",
    "/api/v1/wallets/vi%00sion",
    "/api/v1/departments/vi%00sion",
    "/api/v1/flavors/a100%00",
    "/api/v1/allowances/al%00ice",
    "/api/v1/reports/usage?department=%00",
    "/budgets/allowances/?user=%00",
])
def test_a_nul_byte_in_the_path_or_query_is_a_400(api, url):
    _json_error(api.get(url))


def test_a_nul_byte_in_a_json_field_a_form_field_or_the_idempotency_key_is_a_400(api, payload):
    _json_error(api.post("/api/v1/jobs", payload(flavor="a100\x00"), content_type="application/json"))
    _json_error(api.post("/api/v1/jobs", payload(env={"A\x00": "x"}), content_type="application/json"))
    _json_error(api.post("/api/v1/jobs", payload(), content_type="application/json",
                         HTTP_IDEMPOTENCY_KEY="k\x00"))
    _json_error(api.post("/jobs/new", {"name": "x\x00", "image": "x"}))
    _json_error(api.post("/budgets/allowances/", {"user": "al\x00ice", "limit": "5"}))


def test_json_nested_deeper_than_anyone_needs_is_a_400(api):
    deep = "[" * 50_000 + "]" * 50_000
    _json_error(api.post("/api/v1/jobs", deep, content_type="application/json"))
    deep_object = '{"a":' * 5_000 + "1" + "}" * 5_000
    _json_error(api.post("/api/v1/jobs/batch", deep_object, content_type="application/json"))


@pytest.fixture
def key_work(monkeypatch):
    """Counts the per-key work of the strict serializers: bodies validated, unknown fields named."""
    from portal.api.serializers import StrictSerializer
    from scheduling.api.serializers import JobSubmitSerializer

    counts = {"bodies": 0, "named": 0}
    to_internal, name = StrictSerializer.to_internal_value, JobSubmitSerializer.unknown_field_message

    def counted_to_internal(self, data):
        counts["bodies"] += 1
        return to_internal(self, data)

    def counted_name(self, field):
        counts["named"] += 1
        return name(self, field)

    monkeypatch.setattr(StrictSerializer, "to_internal_value", counted_to_internal)
    monkeypatch.setattr(JobSubmitSerializer, "unknown_field_message", counted_name)
    return counts


def test_a_body_with_100000_keys_is_refused_before_any_key_is_validated(api, payload, key_work):
    keys = {**payload(), **{f"unknown{i:06}": 1 for i in range(100_000)}}
    body = json.dumps(keys)
    assert len(body) > 1_600_000  # the size that kept a worker busy until it was killed
    error = _json_error(api.post("/api/v1/jobs", body, content_type="application/json"))
    assert error["code"] == "malformed_request" and f"{len(keys)} keys" in error["message"]
    assert f"at most {MAX_JSON_KEYS}" in error["message"]
    assert key_work == {"bodies": 0, "named": 0}
    nested = json.dumps(payload(env={f"K{i}": "v" for i in range(MAX_JSON_KEYS + 1)}))  # any object, not only the top
    assert _json_error(api.post("/api/v1/jobs", nested, content_type="application/json"))["code"] == "malformed_request"


def test_a_body_with_more_fields_than_any_serializer_declares_is_one_error_naming_the_limit(api, payload, key_work):
    body = {**payload(), **{f"k{i}": 1 for i in range(500)}}
    r = api.post("/api/v1/jobs", body, content_type="application/json")
    fields = _json_error(r)["fields"]
    assert list(fields) == ["non_field_errors"] and fields["non_field_errors"][0]["code"] == "too_many_fields"
    assert f"at most {MAX_BODY_FIELDS}" in fields["non_field_errors"][0]["message"]
    assert key_work == {"bodies": 1, "named": 0}


def test_unknown_fields_are_listed_up_to_the_cap_then_counted(api, payload, key_work):
    body = {**payload(gpus=0), **{f"k{i:02}": 1 for i in range(60)}}
    fields = _json_error(api.post("/api/v1/jobs", body, content_type="application/json"))["fields"]
    unknown = [name for name, errs in fields.items() if errs[0]["code"] == "unknown_field" and name.startswith("k")]
    assert unknown == [f"k{i:02}" for i in range(UNKNOWN_FIELDS_LISTED)]
    assert fields["non_field_errors"] == [{"code": "unknown_field",
                                           "message": "And 40 more unknown fields (60 in all)."}]
    assert "gpus" in fields  # the other fields' errors are still reported with them
    assert key_work["named"] == UNKNOWN_FIELDS_LISTED


def test_options_on_every_report_format_answers(api):
    for url in ("/api/v1/reports/usage", "/api/v1/reports/usage?format=csv"):
        r = api.options(url)
        assert r.status_code == 200, (url, r.content[:300])


def test_an_over_long_idempotency_key_on_wallet_adjust_is_a_400(lab, api):
    from quotas.services import wallets

    wallets.wallet_create(department=lab.vision, actor=lab.root, balance=1000)
    r = api.post("/api/v1/wallets/vision/adjust", {"amount": 5, "comment": "x"}, content_type="application/json",
                 HTTP_IDEMPOTENCY_KEY="k" * 300)
    assert "Idempotency-Key" in _json_error(r)["fields"]


def test_a_body_over_the_size_limit_gets_the_json_error(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    r = api.post("/api/v1/jobs", '{"name": "' + "x" * 20_000 + '"}', content_type="application/json")
    assert _json_error(r)["code"] == "request_too_large"


def test_every_page_has_a_strict_content_security_policy_and_no_inline_code(api, lab):
    import re as _re

    for url in ("/", "/jobs/new", "/policy/", "/whatif/", "/budgets/", "/login/", "/api/v1/jobs"):
        r = api.get(url)
        policy = r["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "'unsafe-inline'" not in policy, url
        assert "frame-ancestors 'none'" in policy and "http" not in policy
        body = r.content.decode()
        assert not _re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body), f"inline script on {url}"
        assert not _re.search(r"\sstyle=\"", body), f"inline style on {url}"
        assert not _re.search(r"\son[a-z]+=\"", body), f"inline handler on {url}"
    assert "script-src 'self' 'unsafe-inline'" in api.get("/api/redoc/")["Content-Security-Policy"]
