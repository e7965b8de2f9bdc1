"""POST /api/v1/jobs/quote: the same validation as submit, the one cost function, the approval rule, the
department's quota, the free GPUs and the engine's own start estimate, and nothing written."""

from __future__ import annotations

import pytest

from quotas.models import ApprovalRule, Price, Wallet
from quotas.services.pricing import estimated_cost
from scheduling.models import Job, JobEvent, JobState
from scheduling.services.cycle import run_cycle

pytestmark = pytest.mark.django_db


def quote(client, body):
    return client.post("/api/v1/jobs/quote", body, format="json")


def test_an_idle_cluster_starts_the_job_now_within_quota(lab, client_for, payload, django_assert_max_num_queries):
    c = client_for(lab.alice)
    # the snapshot reads members' GPU limits, teams' quota splits, predicted run times, the bookings and
    # maintenance windows too
    with django_assert_max_num_queries(24):
        r = quote(c, payload(gpus=2, max_runtime_s=7200))
    assert r.status_code == 200, r.content
    q = r.json()
    assert (q["flavor"], q["tier"], q["gpus_total"], q["hold_s"], q["gpu_hours"]) == ("a100-80gb", "elastic", 2,
                                                                                     7200, 4.0)
    assert q["free_gpus"] == 8
    assert q["quota"]["nominal"] == 4 and q["quota"]["fits"] and not q["quota"]["must_borrow"]
    assert q["start"]["starts_now"] is True and q["start"]["code"] == "admitted"
    assert not q["needs_approval"] and q["approval_reasons"] == []
    assert q["metered"] is False and q["affordable"] is True
    # read-only: nothing was submitted, no timeline, no pods
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_the_cost_is_the_one_cost_function_and_the_wallet_decides_affordable(lab, client_for, payload):
    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    Wallet.objects.create(department=lab.vision, balance=3000)
    q = quote(client_for(lab.alice), payload(gpus=2, max_runtime_s=3600, bid=400)).json()
    probe = Job(flavor=lab.a100, tier="elastic", gpus_per_pod=2, pods=1, max_runtime_s=3600, bid=400)
    assert q["estimated_cost"] == estimated_cost(job=probe) == 2000
    assert (q["base_price"], q["rate"], q["estimated_credits"]) == (1000, 1000, 2.0)
    assert (q["metered"], q["available"], q["affordable"]) == (True, 3000, True)
    dear = quote(client_for(lab.alice), payload(gpus=4, max_runtime_s=3600)).json()
    assert dear["estimated_cost"] == 4000 and dear["affordable"] is False


def test_approval_is_announced_with_its_reason(lab, client_for, payload):
    ApprovalRule.objects.create(department=lab.vision, gpus_above=2)
    q = quote(client_for(lab.alice), payload(gpus=3)).json()
    assert q["needs_approval"] is True and q["approval_reasons"] == ["3 GPUs > 2"]
    assert "approves" in q["start"]["message"]
    assert not quote(client_for(lab.alice), payload(gpus=2)).json()["needs_approval"]


def test_beyond_nominal_the_job_must_borrow_and_the_engine_says_when(lab, submit, client_for, payload, go):
    for _ in range(2):
        submit(lab.alice, gpus=2, max_runtime_s=3600)
    go(run_cycle)
    assert Job.objects.filter(state=JobState.ADMITTED).count() == 2
    q = quote(client_for(lab.alice), payload(gpus=2)).json()
    assert q["quota"]["used"] == 4 and q["quota"]["must_borrow"] and q["quota"]["borrow"] == 2
    assert q["free_gpus"] == 4
    # bob's department has its whole quota free: fits
    assert quote(client_for(lab.bob), payload(gpus=4)).json()["quota"]["fits"] is True
    # the cluster full: the engine's estimate is in the future, with its reason
    for _ in range(2):
        submit(lab.bob, gpus=2, max_runtime_s=3600)
    go(run_cycle)
    busy = sum(j.gpus_per_pod * j.pods for j in Job.objects.filter(state=JobState.ADMITTED))
    assert busy >= 6  # the engine may keep one GPU back for realtime work
    q = quote(client_for(lab.alice), payload(gpus=4)).json()
    assert q["free_gpus"] == 8 - busy
    assert q["start"]["starts_now"] is False and q["start"]["code"]
    assert q["start"]["estimated_start"] is not None
    assert Job.objects.count() == 4  # still nothing new


def test_uncontested_borrowing_is_quoted_at_the_base_price_not_the_bid(lab, submit, client_for, payload, go):
    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    for _ in range(2):
        submit(lab.alice, gpus=2, max_runtime_s=3600)
    go(run_cycle)
    q = quote(client_for(lab.alice), payload(gpus=2, max_runtime_s=3600, bid=5000)).json()
    assert q["start"]["starts_now"] and q["start"]["borrowed"] and q["start"]["price"] is None
    assert q["estimated_cost"] == 10_000  # the worst case a hold covers: the bid
    assert q["start"]["cost_at_clearing_price"] == 2000  # nobody else wants the GPUs: the base price


def test_same_validation_as_submit(lab, client_for, payload):
    c = client_for(lab.alice)
    r = quote(c, payload(gpus=-1, flavor="h100"))  # (0 GPUs is a CPU-only job: the flavor decides whether it fits)
    assert r.status_code == 400
    fields = r.json()["error"]["fields"]
    assert set(fields) == {"gpus", "flavor"}
    submit = c.post("/api/v1/jobs", payload(gpus=-1, flavor="h100"), format="json").json()["error"]["fields"]
    assert fields == submit
    assert quote(c, payload(privileged=True)).status_code == 400  # StrictSerializer: unknown fields


def test_members_only(lab, client_for, payload):
    assert quote(client_for(lab.stranger), payload()).status_code == 403
    assert quote(client_for(None), payload()).status_code in (401, 403)


def test_the_estimate_is_skipped_past_the_bound(lab, client_for, payload, submit, settings):
    settings.QUOTE_ESTIMATE_MAX_JOBS = 1
    submit(lab.alice)
    q = quote(client_for(lab.alice), payload()).json()
    assert q["start"]["skipped"] is True and q["start"]["estimated_start"] is None
    assert "QUOTE_ESTIMATE_MAX_JOBS" in q["start"]["message"]


def _form(**overrides):
    body = {"name": "train-1", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python train.py",
            "flavor": "a100-80gb", "gpus": "2", "pods": "1", "cpu": "4", "memory": "16Gi", "tier": "elastic",
            "urgency": "normal", "task_type": "train", "max_runtime_s": "3600", "bid": "0"}
    body.update(overrides)
    return body


def test_the_submit_form_quote_fragment(lab, client):
    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1500)
    client.force_login(lab.alice)
    r = client.post("/jobs/new/quote", _form())
    assert r.status_code == 200
    html = r.content.decode()
    assert 'data-quote="cost">3.000 cr<' in html and "now" in html and "8 a100-80gb GPUs" in html
    bad = client.post("/jobs/new/quote", _form(gpus="0", command=""))
    assert bad.status_code == 400
    text = bad.content.decode()
    assert 'data-quote-error="gpus"' in text and 'data-quote-error="command"' in text
    assert Job.objects.count() == 0
    assert client.get("/jobs/new/quote").status_code == 405


def test_free_gpus_leave_out_cordoned_and_draining_clusters(lab, client_for, payload):
    """A cluster closed to admissions has no free GPUs for a new job: the quote's count and /api/v1/cluster's
    agree with the engine, which says all GPUs of the type are in use."""
    from scheduling.models import Cluster, ClusterState, Node

    for state in (ClusterState.CORDONED, ClusterState.DRAINING):
        lab.cluster.state = state
        lab.cluster.save(update_fields=["state"])
        q = quote(client_for(lab.alice), payload(gpus=1)).json()
        assert q["free_gpus"] == 0 and q["start"]["starts_now"] is False
        flavors = {f["flavor"]: f for f in client_for(lab.root).get("/api/v1/cluster").json()["flavors"]}
        assert flavors["a100-80gb"]["free"] == 0 and flavors["a100-80gb"]["closed"] == 8
    # an active second cluster's GPUs count
    east = Cluster.objects.create(name="east", backend="simulated")
    Node.objects.create(cluster=east, name="e0", flavor=lab.a100, gpus=2, labels={"gpu-type": "a100"})
    assert quote(client_for(lab.alice), payload(gpus=1)).json()["free_gpus"] == 2
    flavors = {f["flavor"]: f for f in client_for(lab.root).get("/api/v1/cluster").json()["flavors"]}
    assert flavors["a100-80gb"]["free"] == 2


def test_a_quote_that_cannot_borrow_enough_says_so_as_the_estimate_does(lab, submit, client_for, payload, go):
    for _ in range(2):
        submit(lab.alice, gpus=2, max_runtime_s=3600)
    submit(lab.bob, gpus=3, max_runtime_s=3600)
    go(run_cycle)
    assert Job.objects.filter(state=JobState.ADMITTED).count() == 3
    q = quote(client_for(lab.alice), payload(gpus=2)).json()
    # 2 beyond its nominal 4, and only nlp's last GPU idle: the quota line may not promise the borrowing
    assert q["quota"]["borrow"] == 2 and q["quota"]["cohort_short"] is True
    assert "must borrow" not in q["quota"]["message"] and "1 idle to lend" in q["quota"]["message"], q["quota"]
    assert q["start"]["code"] == "quota_exhausted" and "cannot borrow enough" in q["start"]["message"]
