"""The budget API: scoping (another department is a 404), permissions, bad input (400 with field errors),
pinned query counts, audit of every change, approvals end to end, reports and CSV export."""

from __future__ import annotations

import csv
import io

import pytest

from portal.models import AuditEntry
from quotas.models import ApprovalRule, LedgerEntry, Price, RefillRule, Wallet
from quotas.services import reports
from scheduling.models import Approval, Job, JobState, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


def _error(r, status):
    assert r.status_code == status, r.content
    return r.json()["error"]


# ------------------------------------------------------------------------------------------ wallets


@pytest.mark.parametrize(("actor", "visible"), [
    ("alice", {"vision"}), ("vadmin", {"vision"}), ("bob", {"nlp"}), ("root", {"vision", "nlp"}),
])
def test_wallet_list_is_scoped(money, client_for, actor, visible):
    r = client_for(getattr(money, actor)).get("/api/v1/wallets")
    assert r.status_code == 200
    assert {w["department"] for w in r.json()["results"]} == visible


def test_stranger_and_anonymous_see_no_wallet(money, client_for):
    assert client_for(money.stranger).get("/api/v1/wallets").status_code == 403
    assert client_for(None).get("/api/v1/wallets").status_code in (401, 403)


def test_another_departments_wallet_is_404(money, client_for):
    for path in ("/api/v1/wallets/vision", "/api/v1/wallets/vision/refill-rule",
                 "/api/v1/wallets/vision/approval-rule", "/api/v1/ledger?department=vision"):
        assert _error(client_for(money.bob).get(path), 404)["code"] == "not_found", path
    assert client_for(money.nadmin).post("/api/v1/wallets/vision/adjust", {"amount": 1, "comment": "x"},
                                         format="json").status_code in (403, 404)
    assert client_for(money.root).get("/api/v1/wallets/nope").status_code == 404


def test_wallet_detail_shows_holds_and_burn_rate(money, submit, client_for, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = submit(money.alice, gpus=2)
        run_cycle()
    r = client_for(money.vadmin).get("/api/v1/wallets/vision")
    assert r.status_code == 200
    body = r.json()
    assert (body["balance"], body["held"], body["available"]) == (100_000, 2000, 98_000)
    assert [h["job"] for h in body["holds"]] == [job.pk]
    assert body["holds"][0]["basis"] == "base" and body["holds"][0]["owner"] == "alice"
    assert body["burn_rate"]["running_per_hour"] == 2000


def test_platform_admin_sets_budget_and_it_is_audited(money, client_for):
    c = client_for(money.root)
    r = c.put("/api/v1/wallets/nlp", {"balance": 50_000, "comment": "Q4 grant"}, format="json")
    assert r.status_code == 200 and r.json()["balance"] == 50_000
    entry = LedgerEntry.objects.filter(wallet__department=money.nlp, kind="adjustment").latest("id")
    assert entry.amount == 40_000 and entry.actor == money.root
    audit = AuditEntry.objects.filter(action="wallet.adjust", department=money.nlp).first()
    assert audit.old == {"balance": 10_000} and audit.new["balance"] == 50_000 and audit.actor == money.root
    # department admins cannot set budgets
    assert _error(client_for(money.nadmin).put("/api/v1/wallets/nlp", {"balance": 1}, format="json"),
                  403)["code"] == "permission_denied"


def test_adjust_is_idempotent_with_a_key(money, client_for):
    c = client_for(money.root)
    for _ in range(2):
        r = c.post("/api/v1/wallets/nlp/adjust", {"amount": -2000, "comment": "correction"}, format="json",
                   HTTP_IDEMPOTENCY_KEY="fix-1")
        assert r.status_code == 201
    assert Wallet.objects.get(department=money.nlp).balance == 8000


def test_create_wallet_and_refill_rule(money, client_for):
    from portal.models import Department

    Department.objects.create(slug="robotics", name="Robotics")
    c = client_for(money.root)
    r = c.post("/api/v1/wallets", {"department": "robotics", "balance": 5000}, format="json")
    assert r.status_code == 201 and r.json()["balance"] == 5000
    assert _error(c.post("/api/v1/wallets", {"department": "robotics"}, format="json"), 400)["fields"][
        "department"][0]["code"] == "exists"
    r = c.put("/api/v1/wallets/vision/refill-rule", {"mode": "per_nominal_gpu", "amount": 2500,
                                                      "period": "weekly"}, format="json")
    assert r.status_code == 200 and r.json()["next_amount"] == 2500 * 4
    assert RefillRule.objects.get(department=money.vision).period == "weekly"
    assert AuditEntry.objects.filter(action="refill_rule.set").exists()
    assert client_for(money.vadmin).get("/api/v1/wallets/vision/refill-rule").json()["amount"] == 2500
    assert client_for(money.vadmin).put("/api/v1/wallets/vision/refill-rule", {"amount": 1},
                                        format="json").status_code == 403
    assert c.delete("/api/v1/wallets/vision/refill-rule").status_code == 204


BAD_INPUTS = [
    ("put", "/api/v1/wallets/vision", {"balance": -1}, "balance"),
    ("put", "/api/v1/wallets/vision", {"balance": "lots"}, "balance"),
    ("put", "/api/v1/wallets/vision", {}, "balance"),
    ("put", "/api/v1/wallets/vision", {"balance": 1, "extra": 1}, "extra"),
    ("post", "/api/v1/wallets/vision/adjust", {"amount": 0, "comment": "x"}, "amount"),
    ("post", "/api/v1/wallets/vision/adjust", {"amount": 5}, "comment"),
    ("post", "/api/v1/wallets/vision/adjust", {"amount": -10**9, "comment": "x"}, "amount"),
    ("post", "/api/v1/wallets", {"department": "nope"}, "department"),
    ("put", "/api/v1/wallets/vision/refill-rule", {"amount": -5}, "amount"),
    ("put", "/api/v1/wallets/vision/refill-rule", {"amount": 5, "period": "daily"}, "period"),
    ("put", "/api/v1/wallets/vision/refill-rule", {"amount": 5, "mode": "magic"}, "mode"),
    ("put", "/api/v1/wallets/vision/approval-rule", {"gpus_above": -1}, "gpus_above"),
    ("put", "/api/v1/wallets/vision/approval-rule", {"realtime": "maybe"}, "realtime"),
    ("post", "/api/v1/prices", {"flavor": "a100-80gb", "tier": "gold", "per_gpu_hour": 1}, "tier"),
    ("post", "/api/v1/prices", {"flavor": "nope", "tier": "elastic", "per_gpu_hour": 1}, "flavor"),
    ("post", "/api/v1/prices", {"flavor": "a100-80gb", "tier": "elastic", "per_gpu_hour": -1}, "per_gpu_hour"),
    ("post", "/api/v1/prices", {"flavor": "a100-80gb", "tier": "realtime", "per_gpu_hour": 10}, "per_gpu_hour"),
    ("post", "/api/v1/prices", {"flavor": "a100-80gb", "tier": "elastic", "per_gpu_hour": 5000},
     "per_gpu_hour"),
    ("get", "/api/v1/ledger?kind=theft", None, "kind"),
    ("get", "/api/v1/ledger?since=yesterday", None, "since"),
    ("get", "/api/v1/ledger?job=x", None, "job"),
    ("get", "/api/v1/reports/usage?group_by=planet", None, "group_by"),
    ("get", "/api/v1/reports/usage?period=year", None, "period"),
    ("get", "/api/v1/reports/usage?since=2026-02-01&until=2026-01-01", None, "until"),
    ("get", "/api/v1/reports/usage?format=csv&period=week", None, "period"),
    ("put", "/api/v1/allowances/alice", {"limit": -1}, "limit"),
    ("put", "/api/v1/allowances/alice", {"limit": 5, "period": "yearly"}, "period"),
    ("patch", "/api/v1/quotas/{quota}", {"nominal": -1}, "nominal"),
    ("patch", "/api/v1/quotas/{quota}", {"lending_limit": 99}, "lending_limit"),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), BAD_INPUTS)
def test_bad_input_is_400_with_field_errors(money, client_for, method, path, body, field):
    from quotas.models import Quota

    path = path.replace("{quota}", str(Quota.objects.get(department=money.vision).pk))
    c = client_for(money.root)
    r = getattr(c, method)(path, body, format="json") if body is not None else c.get(path)
    err = _error(r, 400)
    assert err["code"] == "validation_error"
    assert field in err["fields"], err
    assert r["Content-Type"].startswith("application/json")


# ------------------------------------------------------------------------------------------ prices, quotas


def test_prices_members_read_platform_admins_write(money, client_for):
    r = client_for(money.alice).get("/api/v1/prices")
    assert r.status_code == 200 and {p["tier"] for p in r.json()["results"]} == {"realtime", "elastic", "backfill"}
    assert client_for(money.alice).post("/api/v1/prices", {"flavor": "a100-80gb", "tier": "elastic",
                                                            "per_gpu_hour": 1}, format="json").status_code == 403
    assert client_for(money.stranger).get("/api/v1/prices").status_code == 403
    c = client_for(money.root)
    r = c.post("/api/v1/prices", {"flavor": "a100-80gb", "tier": "elastic", "per_gpu_hour": 1200}, format="json")
    assert r.status_code == 200 and r.json()["per_gpu_hour"] == 1200
    r = c.post("/api/v1/prices", {"flavor": "a100-mig-3g.40gb", "tier": "elastic", "per_gpu_hour": 300},
               format="json")
    assert r.status_code == 201
    pk = r.json()["id"]
    assert c.patch(f"/api/v1/prices/{pk}", {"per_gpu_hour": 350}, format="json").json()["per_gpu_hour"] == 350
    assert c.delete(f"/api/v1/prices/{pk}").status_code == 204
    actions = list(AuditEntry.objects.filter(object_type="quotas.price").values_list("action", "old", "new"))
    assert ("price.set", {"per_gpu_hour": 1000}, {"flavor": "a100-80gb", "tier": "elastic",
                                                   "per_gpu_hour": 1200}) in actions
    assert any(a[0] == "price.delete" for a in actions)
    assert Price.objects.get(flavor=money.a100, tier="elastic").per_gpu_hour == 1200


def test_quota_change_by_platform_admin_is_audited(money, client_for):
    from quotas.models import Quota

    q = Quota.objects.get(department=money.vision)
    assert client_for(money.vadmin).patch(f"/api/v1/quotas/{q.pk}", {"nominal": 8},
                                          format="json").status_code == 403
    assert client_for(money.bob).patch(f"/api/v1/quotas/{q.pk}", {"nominal": 8},
                                       format="json").status_code == 404
    # 6 + nlp's 4 nominal GPUs on an 8-GPU cluster: refused unless oversubscription is asked for explicitly
    r = client_for(money.root).patch(f"/api/v1/quotas/{q.pk}", {"nominal": 6, "lending_limit": 2}, format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["nominal"][0]["code"] == "over_capacity"
    assert not AuditEntry.objects.filter(action="quota.set").exists()
    r = client_for(money.root).patch(f"/api/v1/quotas/{q.pk}", {"nominal": 6, "lending_limit": 2,
                                                                "oversubscribe": True}, format="json")
    assert r.status_code == 200 and r.json()["nominal"] == 6 and "oversubscribed" in r.json()["warnings"][0]
    a = AuditEntry.objects.get(action="quota.set")
    assert a.old["nominal"] == 4 and a.new == {"nominal": 6, "borrowing_limit": 4, "lending_limit": 2,
                                               "oversubscribed": True}
    assert "2 GPU(s) oversubscribed" in a.comment


# ------------------------------------------------------------------------------------------ query counts


def test_list_endpoints_have_pinned_query_counts(money, submit, client_for, django_assert_max_num_queries,
                                                 django_capture_on_commit_callbacks):
    ApprovalRule.objects.create(department=money.vision, gpus_above=0)
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(12):
            submit(money.alice if i % 2 else money.amy, name=f"j{i}")
        for i in range(6):
            submit(money.bob, name=f"n{i}")
        run_cycle()
    c = client_for(money.root)
    for path in ("/api/v1/wallets", "/api/v1/prices", "/api/v1/ledger", "/api/v1/approvals",
                 "/api/v1/allowances", "/api/v1/wallets/nlp", "/api/v1/reports/usage?group_by=department,user"):
        with django_assert_max_num_queries(8):
            r = c.get(path)
        assert r.status_code == 200, (path, r.content)
    assert len(c.get("/api/v1/approvals").json()["results"]) == 12
    # 2 opening balances, 6 holds (nlp: 4 inside nominal, 2 borrowed uncontested, at the base price)
    assert len(c.get("/api/v1/ledger").json()["results"]) == 8


# ------------------------------------------------------------------------------------------ approvals


def test_approvals_flow_end_to_end(money, client_for, payload, django_capture_on_commit_callbacks):
    admin = client_for(money.vadmin)
    r = admin.put("/api/v1/wallets/vision/approval-rule", {"gpus_above": 2, "realtime": True}, format="json")
    assert r.status_code == 200
    assert AuditEntry.objects.filter(action="approval_rule.set", department=money.vision).exists()

    alice = client_for(money.alice)
    with django_capture_on_commit_callbacks(execute=True):
        small = alice.post("/api/v1/jobs", payload(name="small", gpus=1), format="json").json()
        big = alice.post("/api/v1/jobs", payload(name="big", gpus=4), format="json").json()
        rt = alice.post("/api/v1/jobs", payload(name="rt", tier="realtime"), format="json").json()
    assert small["state"] == "queued"
    assert big["state"] == "pending_approval" and "4 GPUs > 2" in big["reason"]["message"]
    assert rt["state"] == "pending_approval" and "realtime" in rt["reason"]["message"]
    assert not SimPod.objects.filter(job_id__in=[big["id"], rt["id"]]).exists()  # only approved jobs get pods

    inbox = admin.get("/api/v1/approvals").json()["results"]
    assert [j["id"] for j in inbox] == [big["id"], rt["id"]]
    assert inbox[0]["estimated_cost"] == 4000
    assert _error(alice.get("/api/v1/approvals"), 403)["code"] == "permission_denied"
    assert client_for(money.nadmin).get("/api/v1/approvals").json()["results"] == []

    # a researcher cannot approve; another department's admin gets a 404
    assert _error(alice.post(f"/api/v1/approvals/{big['id']}/approve", {}, format="json"), 403)
    assert _error(client_for(money.nadmin).post(f"/api/v1/approvals/{big['id']}/approve", {}, format="json"), 404)
    assert _error(admin.post(f"/api/v1/approvals/{rt['id']}/reject", {}, format="json"), 400)["fields"]["comment"]

    with django_capture_on_commit_callbacks(execute=True):
        r = admin.post(f"/api/v1/approvals/{big['id']}/approve", {"comment": "go"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "queued" and r.json()["decision"] == "approved"
    assert SimPod.objects.filter(job_id=big["id"], gated=True).exists()
    # approving twice is harmless; rejecting an approved job is a conflict
    assert admin.post(f"/api/v1/approvals/{big['id']}/approve", {}, format="json").status_code == 200
    assert _error(admin.post(f"/api/v1/approvals/{big['id']}/reject", {"comment": "no"}, format="json"),
                  409)["code"] == "invalid_state"

    r = client_for(money.root).post(f"/api/v1/approvals/{rt['id']}/reject", {"comment": "use elastic"},
                                    format="json")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    rejected = Job.objects.get(pk=rt["id"])
    assert rejected.reason_code == "rejected" and "use elastic" in rejected.reason_message
    assert Approval.objects.get(job=rejected).decision == "rejected"
    assert AuditEntry.objects.filter(action="job.reject", actor=money.root).exists()
    assert admin.get("/api/v1/approvals").json()["results"] == []
    events = [e.to_state for e in Job.objects.get(pk=big["id"]).events.filter(kind="transition")]
    assert events == ["pending_approval", "queued"]


def test_cost_rule_and_allowance_require_approval(money, submit, client_for):
    ApprovalRule.objects.create(department=money.vision, cost_above=5000)
    assert submit(money.alice, gpus=2, max_runtime_s=3600).state == JobState.QUEUED  # 2000 mcr
    job = submit(money.alice, gpus=2, max_runtime_s=4 * 3600)  # 8000 mcr
    assert job.state == JobState.PENDING_APPROVAL and "estimated cost 8.000 cr > " in job.reason_message
    r = client_for(money.vadmin).put("/api/v1/allowances/amy", {"limit": 1500}, format="json")
    assert r.status_code == 200
    assert client_for(money.nadmin).put("/api/v1/allowances/amy", {"limit": 1}, format="json").status_code == 404
    assert client_for(money.alice).put("/api/v1/allowances/amy", {"limit": 1}, format="json").status_code == 403
    assert submit(money.amy, gpus=1).state == JobState.QUEUED  # 1000 <= 1500
    over = submit(money.amy, gpus=2)
    assert over.state == JobState.PENDING_APPROVAL and "allowance" in over.reason_message
    listed = client_for(money.vadmin).get("/api/v1/allowances").json()  # amy's queued 1000 mcr job counts
    assert listed == [{"user": "amy", "department": "vision", "limit": 1500, "period": "monthly", "used": 1000}]


def test_queued_jobs_count_against_the_allowance_alone_and_in_a_batch(money, submit, client_for, payload):
    """A 10,000 mcr allowance and 7,200 mcr jobs: the second already needs approval, submitted one by one or
    in one batch, and a cancelled job frees its share again."""
    assert client_for(money.vadmin).put("/api/v1/allowances/amy", {"limit": 10_000}, format="json").status_code == 200
    big = {"gpus": 2, "max_runtime_s": 12_960}  # 2 GPUs x 3.6 h x 1000 mcr/GPU-h = 7200 mcr
    jobs = [submit(money.amy, name=f"a{i}", **big) for i in range(5)]
    assert [j.state for j in jobs] == [JobState.QUEUED] + [JobState.PENDING_APPROVAL] * 4
    assert "(7.200 cr + 7.200 cr > 10.000 cr)" in jobs[1].reason_message
    used = client_for(money.vadmin).get("/api/v1/allowances").json()[0]["used"]
    assert used == 7200
    client_for(money.amy).post(f"/api/v1/jobs/{jobs[0].pk}/cancel", {}, format="json")
    assert submit(money.amy, name="again", **big).state == JobState.QUEUED

    Job.objects.filter(owner=money.amy).update(state=JobState.CANCELLED)
    r = client_for(money.amy).post("/api/v1/jobs/batch", {"jobs": [payload(name=f"b{i}", **big)
                                                                   for i in range(5)]}, format="json")
    assert r.status_code == 201, r.content
    assert [j["state"] for j in r.json()["jobs"]] == ["queued"] + ["pending_approval"] * 4


def test_researchers_read_only_their_own_allowance(money, client_for):
    for user, limit in ((money.alice, 5000), (money.amy, 6000)):
        client_for(money.vadmin).put(f"/api/v1/allowances/{user.username}", {"limit": limit}, format="json")
    assert [a["user"] for a in client_for(money.alice).get("/api/v1/allowances").json()] == ["alice"]
    assert [a["user"] for a in client_for(money.vadmin).get("/api/v1/allowances").json()] == ["alice", "amy"]
    assert client_for(money.bob).get("/api/v1/allowances").json() == []


# ------------------------------------------------------------------------------------------ ledger, reports


def _run_some_jobs(lab, submit, capture):
    from datetime import timedelta

    from django.conf import settings

    with capture(execute=True):
        a = submit(lab.alice, gpus=2, name="a")
        b = submit(lab.bob, gpus=1, name="b")
    # billing starts at admission, an hour before the simulated cluster's clock (which stands still: the pods
    # end by it, so the hour is exact however long the test took to get here)
    with capture(execute=True):
        run_cycle(now=settings.SIM_CLOCK.now() - timedelta(hours=1))
    with capture(execute=True):
        sync_cluster()
    SimPod.objects.filter(phase="Running").update(runtime_s=0)  # its runtime is over: it ended as it started, now
    with capture(execute=True):
        sync_cluster()
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.SUCCEEDED}
    return a, b


def test_ledger_is_scoped_and_filterable(money, submit, client_for, django_capture_on_commit_callbacks):
    a, b = _run_some_jobs(money, submit, django_capture_on_commit_callbacks)
    mine = client_for(money.alice).get("/api/v1/ledger").json()["results"]
    assert mine and {e["department"] for e in mine} == {"vision"}
    assert client_for(money.alice).get(f"/api/v1/ledger?job={b.pk}").json()["results"] == []
    settles = client_for(money.root).get("/api/v1/ledger?kind=settle").json()["results"]
    assert {e["job"] for e in settles} == {a.pk, b.pk}


def test_job_cost_endpoint(money, submit, client_for, django_capture_on_commit_callbacks):
    a, b = _run_some_jobs(money, submit, django_capture_on_commit_callbacks)
    r = client_for(money.amy).get(f"/api/v1/jobs/{a.pk}/cost")
    assert r.status_code == 200
    body = r.json()
    assert body["final"] == 2000 and body["charged"] == 2000 and body["hold"] == 0
    assert client_for(money.bob).get(f"/api/v1/jobs/{a.pk}/cost").status_code == 404


def test_usage_report_json_and_csv(money, submit, client_for, django_capture_on_commit_callbacks):
    _run_some_jobs(money, submit, django_capture_on_commit_callbacks)
    r = client_for(money.root).get("/api/v1/reports/usage?group_by=department,user&period=day")
    assert r.status_code == 200
    rows = {(x["department"], x["user"]): x for x in r.json()["rows"]}
    assert rows[("vision", "alice")]["gpu_hours"] == 2.0 and rows[("vision", "alice")]["charged_mcr"] == 2000
    assert rows[("nlp", "bob")]["net_mcr"] == 1000

    mine = client_for(money.alice).get("/api/v1/reports/usage?group_by=user").json()["rows"]
    assert [x["user"] for x in mine] == ["alice"]
    assert _error(client_for(money.alice).get("/api/v1/reports/usage?department=nlp"), 404)["code"] == "not_found"

    r = client_for(money.root).get("/api/v1/reports/usage?group_by=department,flavor&format=csv")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert "attachment" in r["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(r.content.decode())))
    assert list(table[0]) == list(reports.REPORT_COLUMNS)
    got = {(t["department"], t["flavor"]): t for t in table}
    assert got[("vision", "a100-80gb")]["charged_mcr"] == "2000"
    assert got[("nlp", "a100-80gb")]["gpu_hours"] == "1.0" and got[("nlp", "a100-80gb")]["user"] == ""


def test_the_usage_csv_neutralises_names_a_spreadsheet_would_run(money, submit, client_for,
                                                                 django_capture_on_commit_callbacks):
    from django.contrib.auth import get_user_model

    get_user_model().objects.filter(pk=money.alice.pk).update(username="@SUM+1-2")
    _run_some_jobs(money, submit, django_capture_on_commit_callbacks)
    r = client_for(money.root).get("/api/v1/reports/usage?group_by=department,user&format=csv")
    table = list(csv.DictReader(io.StringIO(r.content.decode())))
    users = {t["user"]: t for t in table}
    assert "'@SUM+1-2" in users and "@SUM+1-2" not in users and "bob" in users
    assert users["'@SUM+1-2"]["charged_mcr"] == "2000"  # numbers stay numbers


def test_a_wallet_adjust_replayed_with_another_body_is_a_422(money, client_for):
    admin = client_for(money.root)
    first = admin.post("/api/v1/wallets/vision/adjust", {"amount": 500, "comment": "grant"}, format="json",
                       HTTP_IDEMPOTENCY_KEY="adj-1")
    assert first.status_code == 201
    again = admin.post("/api/v1/wallets/vision/adjust", {"amount": 500, "comment": "grant"}, format="json",
                       HTTP_IDEMPOTENCY_KEY="adj-1")
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
    for body in ({"amount": 900, "comment": "grant"}, {"amount": 500, "comment": "another"}):
        r = admin.post("/api/v1/wallets/vision/adjust", body, format="json", HTTP_IDEMPOTENCY_KEY="adj-1")
        assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_reused"
    assert Wallet.objects.get(department=money.vision).balance == 100_500
    long_key = "k" * 200  # the longest key a client may send still fits the ledger's column
    assert admin.post("/api/v1/wallets/vision/adjust", {"amount": 1, "comment": "x"}, format="json",
                      HTTP_IDEMPOTENCY_KEY=long_key).status_code == 201


def test_the_usage_report_gives_the_efficiency_of_the_measured_attempts(money, submit, client_for,
                                                                        django_capture_on_commit_callbacks):
    from observability.models import AttemptUsage

    a, b = _run_some_jobs(money, submit, django_capture_on_commit_callbacks)
    AttemptUsage.objects.all().delete()  # what was measured is what this test says: a, not b
    a.refresh_from_db()
    AttemptUsage.objects.create(job=a, attempt=a.attempt, source="simulated", gpus=2, started_at=a.started_at,
                                step_s=60, samples=60, busy_gpus=0.5, idle_minutes=0, final=True)
    rows = {x["user"]: x for x in client_for(money.root).get("/api/v1/reports/usage?group_by=user").json()["rows"]}
    assert (rows["alice"]["measured_gpu_hours"], rows["alice"]["used_gpu_hours"], rows["alice"]["efficiency"]) == (
        2.0, 0.5, 0.25)
    assert rows["bob"]["efficiency"] is None and rows["bob"]["measured_gpu_hours"] == 0  # unknown, not zero
    table = list(csv.DictReader(io.StringIO(client_for(money.alice).get(
        "/api/v1/reports/usage?group_by=user&format=csv").content.decode())))
    assert [(t["user"], t["efficiency"]) for t in table] == [("alice", "0.25")]
