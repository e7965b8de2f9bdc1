"""The quota API's optional numbers: a field left out keeps what is in force, an explicit null is no limit
("lend all" for lending), for a department admin's request as for a platform admin's direct change. A request
stores the numbers approving it would set, so the approver sees exactly what changes."""

from __future__ import annotations

import pytest
from django.test import Client

from portal.models import AuditEntry
from quotas.models import Quota, QuotaChangeRequest
from quotas.selectors import quota_request_changes

pytestmark = pytest.mark.django_db

URL = "/api/v1/quota-requests"


def _fields(r):
    return r.json()["error"]["fields"]


@pytest.fixture
def limited(lab):
    """vision's a100 quota: nominal 4, borrowing limit 2, lending limit 4 (nlp's nominal 2: room for 2 more)."""
    Quota.objects.filter(department=lab.nlp).update(nominal=2)
    Quota.objects.filter(department=lab.vision, cluster=None).update(nominal=4, borrowing_limit=2, lending_limit=4)
    return Quota.objects.get(department=lab.vision, cluster=None)


def _request(client_for, lab, **body):
    return client_for(lab.vadmin).post(URL, {"department": "vision", "flavor": "a100-80gb", "reason": "more",
                                             **body}, format="json")


def _approve(client_for, lab, pk):
    r = client_for(lab.root).post(f"{URL}/{pk}/approve", {"comment": "ok"}, format="json")
    assert r.status_code == 200, r.json()


def test_a_request_with_only_a_nominal_keeps_the_limits_in_force(lab, client_for, limited):
    r = _request(client_for, lab, nominal=5)
    assert r.status_code == 201, r.json()
    assert (r.json()["nominal"], r.json()["borrowing_limit"], r.json()["lending_limit"]) == (5, 2, 4)
    req = QuotaChangeRequest.objects.get(pk=r.json()["id"])
    # the approver sees the limits unchanged, nothing flagged as widening
    assert quota_request_changes([req])[req.pk] == [
        ("nominal", "4", "5", False), ("borrowing", "2", "2", False), ("lending", "4", "4", False)]
    _approve(client_for, lab, req.pk)
    limited.refresh_from_db()
    assert (limited.nominal, limited.borrowing_limit, limited.lending_limit) == (5, 2, 4)


def test_a_request_may_leave_out_the_nominal_too(lab, client_for, limited):
    r = _request(client_for, lab, lending_limit=1)
    assert r.status_code == 201, r.json()
    assert (r.json()["nominal"], r.json()["borrowing_limit"], r.json()["lending_limit"]) == (4, 2, 1)
    assert AuditEntry.objects.get(action="quota_request.create").new["lending_limit"] == 1


def test_an_explicit_null_removes_a_limit_and_the_inbox_says_it_widens(lab, client_for, limited):
    r = _request(client_for, lab, nominal=4, lending_limit=None, borrowing_limit=None)
    assert r.status_code == 201, r.json()
    req = QuotaChangeRequest.objects.get(pk=r.json()["id"])
    assert (req.borrowing_limit, req.lending_limit) == (None, None)
    assert quota_request_changes([req])[req.pk] == [
        ("nominal", "4", "4", False), ("borrowing", "2", "unlimited", True), ("lending", "4", "all", True)]
    inbox = Client()
    inbox.force_login(lab.root)
    page = inbox.get("/lab/quota-requests/")
    assert page.status_code == 200
    assert 'class="widens" data-limit="lending">lending 4 → <strong>all</strong> (widens)' in page.content.decode()
    _approve(client_for, lab, req.pk)
    limited.refresh_from_db()
    assert (limited.nominal, limited.borrowing_limit, limited.lending_limit) == (4, None, None)


def test_without_a_quota_in_force_every_number_is_given(lab, client_for):
    """Nothing to keep: a department without a quota of a flavor cannot use it, so a left-out limit must not
    become "no limit"."""
    body = {"flavor": "a100-mig-3g.40gb", "nominal": 0}
    r = _request(client_for, lab, **body)
    assert r.status_code == 400
    assert set(_fields(r)) == {"borrowing_limit", "lending_limit"}
    assert _fields(r)["lending_limit"][0]["code"] == "required"
    assert "null: lend all" in _fields(r)["lending_limit"][0]["message"]
    r = _request(client_for, lab, flavor="a100-mig-3g.40gb", borrowing_limit=0, lending_limit=None)
    assert r.status_code == 400 and set(_fields(r)) == {"nominal"}
    assert not QuotaChangeRequest.objects.exists()
    r = _request(client_for, lab, **body, borrowing_limit=0, lending_limit=None)
    assert r.status_code == 201, r.json()
    assert (r.json()["nominal"], r.json()["borrowing_limit"], r.json()["lending_limit"]) == (0, 0, None)


@pytest.mark.parametrize(("body", "field", "code"), [
    ({"nominal": None}, "nominal", "null"),
    ({"nominal": -1}, "nominal", "min_value"),
    ({"lending_limit": "all"}, "lending_limit", "invalid"),
    ({"borrowing_limit": -1}, "borrowing_limit", "min_value"),
    ({"lending_limit": 5}, "lending_limit", "exceeds_nominal"),  # above the nominal it keeps (4)
    ({"nominal": 1}, "lending_limit", "exceeds_nominal"),  # below the lending limit it keeps (4)
])
def test_bad_numbers_are_field_errors_and_file_nothing(lab, client_for, limited, body, field, code):
    r = _request(client_for, lab, **body)
    assert r.status_code == 400, r.json()
    assert _fields(r)[field][0]["code"] == code
    assert not QuotaChangeRequest.objects.exists()


def test_a_platform_admin_changes_a_quota_by_the_same_rule(lab, client_for, limited):
    c = client_for(lab.root)
    r = c.patch(f"/api/v1/quotas/{limited.pk}", {"nominal": 5}, format="json")
    assert r.status_code == 200, r.json()
    assert (r.json()["nominal"], r.json()["borrowing_limit"], r.json()["lending_limit"]) == (5, 2, 4)
    r = c.put(f"/api/v1/quotas/{limited.pk}", {"borrowing_limit": 1}, format="json")
    assert r.status_code == 200 and (r.json()["nominal"], r.json()["lending_limit"]) == (5, 4)
    r = c.patch(f"/api/v1/quotas/{limited.pk}", {"lending_limit": None}, format="json")
    assert r.status_code == 200 and (r.json()["borrowing_limit"], r.json()["lending_limit"]) == (1, None)
    r = c.patch(f"/api/v1/quotas/{limited.pk}", {"nominal": None, "borrowing_limit": "x"}, format="json")
    assert r.status_code == 400 and set(_fields(r)) == {"nominal", "borrowing_limit"}
    limited.refresh_from_db()
    assert (limited.nominal, limited.borrowing_limit, limited.lending_limit) == (5, 1, None)
