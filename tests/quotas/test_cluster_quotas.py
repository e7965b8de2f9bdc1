"""Per-cluster quotas: a quota that names a cluster limits only that cluster's GPUs of its flavor, beside the
department's global quota. Stored with their constraints, validated against that cluster's GPUs, audited, given
to the engine (a job its per-cluster quota blocks on one cluster starts on another), served by the quota API,
shown on the pages, kept by the What-if, and a cluster with quotas is not deleted."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.errors import Conflict, ValidationFailed
from portal.models import AuditEntry
from quotas.models import Quota
from quotas.services import rules
from scheduling.models import Cluster, Job
from scheduling.services.cluster_config import cluster_delete, node_group_set
from scheduling.services.snapshot import build_snapshot
from scheduling.services.whatif import current_quotas

pytestmark = pytest.mark.django_db


@pytest.fixture
def east(lab):
    """A second, dearer cluster with one 4-GPU node of a100 (the default one has two)."""
    row = Cluster.objects.create(name="east", cost_rank=5, labels={"site": "east"})
    node_group_set(cluster=row, actor=lab.root, name="e", flavor=lab.a100, nodes=1, gpus_per_node=4)
    return row


def _fields(r) -> dict:
    body = r.json()
    return body.get("fields") or body.get("error", {}).get("fields") or {}


# ------------------------------------------------------------------------------------------ the model


def test_one_global_and_one_per_cluster_quota_per_department_and_flavor(lab, east):
    Quota.objects.create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(department=lab.vision, flavor=lab.a100, nominal=1)  # a second global one
    keys = [q.key for q in Quota.objects.filter(department=lab.vision).select_related("flavor", "cluster")]
    assert keys == ["a100-80gb", "a100-80gb@east"]  # the global quota first


# ------------------------------------------------------------------------------------------ the rules


def test_a_per_cluster_quota_is_checked_against_that_clusters_gpus_and_audited(lab, east):
    with pytest.raises(ValidationFailed) as e:
        rules.quota_create(department=lab.nlp, flavor=lab.a100, cluster=east, nominal=5, actor=lab.root)
    message = e.value.fields["nominal"][0]["message"]
    assert "a100-80gb on east" in message and "cluster east has 4" in message
    assert not Quota.objects.filter(cluster=east).exists()
    # The global quotas (8 of 12 GPUs) do not count against east's 4.
    q = rules.quota_create(department=lab.nlp, flavor=lab.a100, cluster=east, nominal=4, actor=lab.root)
    assert q.warnings == []
    entry = AuditEntry.objects.get(action="quota.create")
    assert entry.new == {"nominal": 4, "borrowing_limit": None, "lending_limit": None, "cluster": "east"}
    # and per-cluster quotas do not count against the global capacity either
    rules.quota_set(quota=Quota.objects.get(department=lab.vision, cluster=None), nominal=8, actor=lab.root)
    with pytest.raises(ValidationFailed):
        rules.quota_set(quota=Quota.objects.get(department=lab.vision, cluster=None), nominal=9, actor=lab.root)
    with pytest.raises(ValidationFailed) as e:
        rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=1, actor=lab.root)
    assert e.value.fields["nominal"][0]["code"] == "over_capacity"
    q = rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=1, oversubscribe=True,
                           actor=lab.root)
    assert q.warnings and "east" in q.warnings[0]
    rules.quota_set(quota=q, nominal=0, actor=lab.root)
    assert AuditEntry.objects.filter(action="quota.set").order_by("-pk").first().new["cluster"] == "east"
    rules.quota_delete(quota=q, actor=lab.root)
    assert AuditEntry.objects.get(action="quota.delete").old["cluster"] == "east"


def test_a_second_quota_of_the_same_scope_is_a_field_error(lab, east):
    rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=1, actor=lab.root)
    with pytest.raises(ValidationFailed) as e:
        rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=1, actor=lab.root)
    assert e.value.fields["flavor"][0]["code"] == "unique" and "on east" in e.value.fields["flavor"][0]["message"]


# ------------------------------------------------------------------------------------------ the engine


def test_the_snapshot_carries_each_quotas_cluster(lab, east):
    rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=2, actor=lab.root)
    snap, _ = build_snapshot(now=timezone.now())
    assert {(q.department, q.flavor, q.cluster, q.nominal) for q in snap.quotas} == {
        ("nlp", "a100-80gb", None, 4), ("vision", "a100-80gb", None, 4), ("vision", "a100-80gb", "east", 2)}


@pytest.mark.parametrize("blocked", [False, True])
def test_a_job_its_per_cluster_quota_blocks_on_one_cluster_starts_on_the_other(lab, east, submit, go, blocked):
    from scheduling.services.cycle import run_cycle

    if blocked:  # vision may not use the default cluster's a100s at all
        rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=lab.cluster, nominal=0,
                           borrowing_limit=0, actor=lab.root)
    job = go(submit, lab.alice, gpus=2)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state in ("admitted", "running")
    # without the per-cluster quota the cheaper default cluster wins
    assert job.cluster.name == ("east" if blocked else "default")


def test_a_job_that_fits_no_clusters_quota_waits(lab, east, submit, go):
    from scheduling.services.cycle import run_cycle

    for cluster in (lab.cluster, east):
        rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=cluster, nominal=1, borrowing_limit=0,
                           actor=lab.root)
    job = go(submit, lab.alice, gpus=2)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == "queued"
    assert Job.objects.filter(state__in=("admitted", "running")).count() == 0


# ------------------------------------------------------------------------------------------ the API


def test_the_api_creates_and_lists_per_cluster_quotas(lab, east, client_for):
    c = client_for(lab.root)
    r = c.post("/api/v1/quotas", {"department": "vision", "flavor": "a100-80gb", "cluster": "east", "nominal": 2},
               format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["cluster"] == "east" and r.json()["nominal"] == 2
    pk = r.json()["id"]
    rows = {(q["flavor"], q["cluster"]): q for q in client_for(lab.alice).get("/api/v1/quotas").json()["results"]}
    assert set(rows) == {("a100-80gb", None), ("a100-80gb", "east")}
    # a member of another department does not see it
    assert ("a100-80gb", "east") not in {(q["flavor"], q["cluster"]) for q in
                                         client_for(lab.bob).get("/api/v1/quotas").json()["results"]}
    assert client_for(lab.bob).get(f"/api/v1/quotas/{pk}").status_code == 404
    assert client_for(lab.alice).patch(f"/api/v1/quotas/{pk}", {"nominal": 1}, format="json").status_code == 403
    r = c.patch(f"/api/v1/quotas/{pk}", {"nominal": 3}, format="json")
    assert r.status_code == 200 and r.json()["cluster"] == "east" and r.json()["nominal"] == 3


def test_in_use_counts_the_quotas_scope(lab, east, client_for, submit, go):
    from scheduling.services.cycle import run_cycle

    rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=2, actor=lab.root)
    go(submit, lab.alice, gpus=2, cluster_selector={"site": "east"})
    go(submit, lab.alice, gpus=1)  # on the cheaper default cluster
    go(run_cycle)
    assert Job.objects.filter(state__in=("admitted", "running")).count() == 2
    rows = {q["cluster"]: q["in_use"] for q in client_for(lab.alice).get("/api/v1/quotas").json()["results"]}
    assert rows == {None: 3, "east": 2}


@pytest.mark.parametrize(("body", "field"), [
    ({"department": "vision", "flavor": "a100-80gb", "cluster": "nowhere", "nominal": 1}, "cluster"),
    ({"department": "vision", "flavor": "a100-80gb", "cluster": 7, "nominal": 1}, "cluster"),
    ({"department": "vision", "flavor": "a100-80gb", "cluster": "east", "nominal": 5}, "nominal"),
    ({"department": "vision", "flavor": "a100-80gb", "cluster": "default", "nominal": 1, "lending_limit": 2},
     "lending_limit"),
])
def test_bad_per_cluster_quotas_are_400_with_field_errors(lab, east, client_for, body, field):
    r = client_for(lab.root).post("/api/v1/quotas", body, format="json")
    assert r.status_code == 400, r.json()
    assert field in _fields(r)
    assert not Quota.objects.filter(cluster__isnull=False).exists()


def test_a_quotas_cluster_does_not_change(lab, east, client_for):
    q = rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=1, actor=lab.root)
    r = client_for(lab.root).patch(f"/api/v1/quotas/{q.pk}", {"cluster": None}, format="json")
    assert r.status_code == 400 and "cluster" in _fields(r)
    assert Quota.objects.get(pk=q.pk).cluster == east


# ------------------------------------------------------------------------------------------ clusters, What-if


def test_a_cluster_with_quotas_is_not_deleted(lab, east):
    q = rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=1, actor=lab.root)
    with pytest.raises(Conflict, match="vision/a100-80gb"):
        cluster_delete(cluster=east, actor=lab.root)
    assert Cluster.objects.filter(name="east").exists()
    rules.quota_delete(quota=q, actor=lab.root)
    cluster_delete(cluster=east, actor=lab.root)
    assert not Cluster.objects.filter(name="east").exists()


def test_the_whatif_sees_per_cluster_quotas_by_the_simulators_key(lab, east):
    rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=2, borrowing_limit=0,
                       actor=lab.root)
    assert current_quotas()["vision"] == {
        "a100-80gb": {"nominal": 4, "borrowing_limit": 4, "lending_limit": None},
        "a100-80gb@east": {"nominal": 2, "borrowing_limit": 0, "lending_limit": None}}


# ------------------------------------------------------------------------------------------ pages, requests


def test_the_department_page_shows_each_quotas_cluster_and_the_form_changes_the_global_one(lab, east):
    from django.test import Client

    per = rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=2, actor=lab.root)
    c = Client()
    c.force_login(lab.alice)
    page = c.get("/lab/departments/vision/").content.decode()
    assert '<tr data-quota="a100-80gb"><td>a100-80gb</td><td>all clusters</td><td>4</td>' in page
    assert '<tr data-quota="a100-80gb@east"><td>a100-80gb</td><td>east</td><td>2</td>' in page
    c.force_login(lab.root)
    r = c.post("/lab/departments/vision/quota", {"flavor": "a100-80gb", "nominal": "3", "borrowing_unlimited": "on",
                                                 "lending_all": "on", "reason": "less"})
    assert r.status_code == 302
    assert Quota.objects.get(department=lab.vision, cluster=None).nominal == 3
    assert Quota.objects.get(pk=per.pk).nominal == 2


def test_an_approved_request_changes_the_global_quota(lab, east):
    from quotas.services import quota_requests

    per = rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=2, actor=lab.root)
    req = quota_requests.quota_request_create(department=lab.vision, flavor=lab.a100, actor=lab.vadmin, nominal=3,
                                              reason="fewer jobs")
    quota_requests.quota_request_approve(req=req, actor=lab.root)
    assert Quota.objects.get(department=lab.vision, cluster=None).nominal == 3
    assert Quota.objects.get(pk=per.pk).nominal == 2


def _page_client(user):
    from django.test import Client

    c = Client()
    c.force_login(user)
    return c


def test_a_platform_admin_sets_a_per_cluster_quota_on_the_form(lab, east):
    c = _page_client(lab.root)
    form = c.get("/lab/departments/vision/quota").content.decode()
    assert '<option value="east" >east only</option>' in form  # several clusters: the form offers them
    body = {"flavor": "a100-80gb", "cluster": "east", "nominal": "2", "borrowing_limit": "0", "lending_all": "on",
            "reason": "east is for vision's inference"}
    r = c.post("/lab/departments/vision/quota", body)
    assert r.status_code == 302, r.content.decode()
    per = Quota.objects.get(department=lab.vision, cluster=east)
    assert (per.nominal, per.borrowing_limit) == (2, 0)
    assert Quota.objects.get(department=lab.vision, cluster=None).nominal == 4  # the global one is untouched
    page = " ".join(c.get("/lab/departments/vision/quota?flavor=a100-80gb&cluster=east").content.decode().split())
    # east's 4 GPUs, none held by other departments there, 4 left; vision's own 2 beside them
    assert ('<tr data-scope="a100-80gb@east"><td>a100-80gb</td><td>east</td> <td>4</td><td data-col="others">0</td>'
            '<td data-col="left">4</td> <td>2</td><td>0</td>') in page
    assert ('<tr data-scope="a100-mig-3g.40gb"><td>a100-mig-3g.40gb (MIG)</td><td>all clusters</td> <td>0</td>'
            '<td data-col="others">0</td><td data-col="left">0</td> <td>—</td>') in page
    assert 'name="nominal" value="2"' in page  # prefilled from the per-cluster quota
    assert "quota%3Avision%3Aa100-80gb%40east%3Anominal=2" in page  # What-if by the simulator's key
    r = c.post("/lab/departments/vision/quota", {**body, "nominal": "3"})
    assert r.status_code == 302 and Quota.objects.get(pk=per.pk).nominal == 3
    entry = AuditEntry.objects.filter(action="quota.set").latest("id")
    assert entry.new["nominal"] == 3


@pytest.mark.parametrize(("body", "field"), [
    ({"cluster": "nowhere", "nominal": "1"}, "cluster"),
    ({"cluster": "east", "nominal": "5"}, "nominal"),  # east has 4 GPUs
])
def test_a_bad_per_cluster_quota_on_the_form_is_a_field_error_and_saves_nothing(lab, east, body, field):
    r = _page_client(lab.root).post("/lab/departments/vision/quota", {
        "flavor": "a100-80gb", "borrowing_unlimited": "on", "lending_all": "on", "reason": "", **body})
    assert r.status_code == 400
    assert f'data-error-for="{field}"' in r.content.decode() or field in r.context["errors"]
    assert not Quota.objects.filter(cluster__isnull=False).exists()


def test_a_department_admin_requests_a_per_cluster_quota_and_its_approval_sets_that_one(lab, east):
    r = _page_client(lab.vadmin).post("/lab/departments/vision/quota", {
        "flavor": "a100-80gb", "cluster": "east", "nominal": "2", "borrowing_unlimited": "on", "lending_all": "on",
        "reason": "latency tests need the east site"})
    assert r.status_code == 302
    from quotas.models import QuotaChangeRequest

    req = QuotaChangeRequest.objects.get()
    assert req.cluster == east and req.nominal == 2
    root = _page_client(lab.root)
    assert f'<tr data-request="{req.pk}"><td>{req.pk}</td><td>vision</td><td>a100-80gb on east</td>' in root.get(
        "/lab/quota-requests/").content.decode()
    assert root.post(f"/lab/quota-requests/{req.pk}/approve", {"comment": "ok"}).status_code == 302
    assert Quota.objects.get(department=lab.vision, cluster=east).nominal == 2
    assert Quota.objects.get(department=lab.vision, cluster=None).nominal == 4


def test_the_api_files_per_cluster_requests_with_field_errors_for_unknown_clusters(lab, east, client_for):
    c = client_for(lab.vadmin)
    body = {"department": "vision", "flavor": "a100-80gb", "cluster": "east", "nominal": 1, "reason": "tests"}
    # vision has no quota on east to keep: a limit left out is not "no limit", it must be given
    r = c.post("/api/v1/quota-requests", body, format="json")
    assert r.status_code == 400 and set(_fields(r)) == {"borrowing_limit", "lending_limit"}
    assert "no quota of a100-80gb on east" in _fields(r)["borrowing_limit"][0]["message"]
    body.update(borrowing_limit=0, lending_limit=None)
    r = c.post("/api/v1/quota-requests", body, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["cluster"] == "east"
    assert c.get(f"/api/v1/quota-requests/{r.json()['id']}").json()["cluster"] == "east"
    bad = c.post("/api/v1/quota-requests", {**body, "cluster": "nowhere"}, format="json")
    assert bad.status_code == 400 and "cluster" in _fields(bad)
    plain = c.post("/api/v1/quota-requests", {**body, "cluster": None}, format="json")
    assert plain.status_code == 201 and plain.json()["cluster"] is None


def test_a_cluster_with_pending_quota_requests_is_not_deleted(lab, east):
    from quotas.services import quota_requests

    req = quota_requests.quota_request_create(department=lab.vision, flavor=lab.a100, cluster=east,
                                              actor=lab.vadmin, nominal=1, borrowing_limit=0, lending_limit=None,
                                              reason="tests")
    with pytest.raises(Conflict, match=f"pending \\({req.pk}\\)"):
        cluster_delete(cluster=east, actor=lab.root)
    quota_requests.quota_request_reject(req=req, actor=lab.root, comment="no")
    cluster_delete(cluster=east, actor=lab.root)  # decided requests go with it; the audit log keeps them
    assert not Cluster.objects.filter(name="east").exists()
    assert AuditEntry.objects.filter(action="quota_request.create", new__cluster="east").exists()


def test_summaries_count_the_global_quota_or_else_the_per_cluster_ones(lab, east):
    from scheduling.selectors import quota_use

    rules.quota_create(department=lab.vision, flavor=lab.a100, cluster=east, nominal=2, actor=lab.root)
    rules.quota_create(department=lab.nlp, flavor=lab.a100, cluster=east, nominal=1, actor=lab.root)
    rules.quota_create(department=lab.nlp, flavor=lab.a100, cluster=lab.cluster, nominal=3, actor=lab.root)
    Quota.objects.filter(department=lab.nlp, cluster=None).delete()
    assert Quota.objects.nominal_by_flavor() == {(lab.vision.pk, lab.a100.pk): 4, (lab.nlp.pk, lab.a100.pk): 4}
    assert [r["nominal"] for r in quota_use(department_id=lab.vision.pk)] == [4]  # not 4 + 2
    assert [r["nominal"] for r in quota_use(department_id=lab.nlp.pk)] == [4]  # 1 + 3
