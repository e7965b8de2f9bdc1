"""Clusters as data: how each is reached (a kubeconfig file, a variable holding a kubeconfig, a context),
validated settings (400 with field errors, nothing written), what members and admins see, cluster selectors on
jobs, and credentials that never reach the API, the pages or the logs."""

from __future__ import annotations

import logging

import pytest
import yaml

from portal.models import AuditEntry
from scheduling import backends, tasks
from scheduling.backends.kube import KubernetesBackend
from scheduling.models import Cluster, Job, Node
from scheduling.services.snapshot import build_snapshot
from tests.fakes.k8s_api import FakeKube, FakeKubeServer

pytestmark = pytest.mark.django_db

TOKEN = "tok-s3cr3t-0123456789abcdef"  # noqa: S105 - a credential that must never be shown


def kubeconfig(server: str, *, context: str = "east", token: str = TOKEN) -> dict:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "c", "cluster": {"server": server}},
                     {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "nowhere", "user": "u"}}],
    }


@pytest.fixture
def api_server():
    server = FakeKubeServer(FakeKube()).start()
    server.fake.add_node("east-0", gpus=8, labels={"gpu-type": "a100"})
    yield server.fake
    server.stop()


def _fields(r) -> dict:
    return r.json().get("fields") or r.json().get("error", {}).get("fields") or {}


# ------------------------------------------------------------------------------------------- reaching a cluster


def test_a_cluster_is_reached_through_its_kubeconfig_file_and_context(lab, api_server, tmp_path, client_for):
    path = tmp_path / "east.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(api_server.url)))
    r = client_for(lab.root).post("/api/v1/clusters", {"name": "east", "backend": "kubernetes",
                                                       "kubeconfig": str(path), "context": "east",
                                                       "labels": {"region": "east"}}, format="json")
    assert r.status_code == 201, r.content
    out = tasks.sync_one(Cluster.objects.get(name="east").pk)  # the backend is built from the row alone
    assert "unreachable" not in out, Cluster.objects.get(name="east").last_error
    assert list(Node.objects.filter(cluster__name="east").values_list("name", "gpus")) == [("east-0", 8)]
    assert isinstance(backends.get_backend("east"), KubernetesBackend)
    # Another context of the same file is another cluster: the row's context is what is used.
    Cluster.objects.filter(name="east").update(context="other")
    assert tasks.sync_one(Cluster.objects.get(name="east").pk) == {"unreachable": 1}


def test_a_cluster_is_reached_through_a_variable_holding_its_kubeconfig(lab, api_server, monkeypatch):
    monkeypatch.setenv("EAST_KUBECONFIG", yaml.safe_dump(kubeconfig(api_server.url)))
    row = Cluster.objects.create(name="east", backend="kubernetes", kubeconfig_env="EAST_KUBECONFIG",
                                 context="east")
    assert "unreachable" not in tasks.sync_one(row.pk)
    assert Node.objects.filter(cluster=row).count() == 1
    # A changed reference builds a new client at the next use.
    first = backends.get_backend("east")
    Cluster.objects.filter(pk=row.pk).update(kubeconfig_env="NOT_SET_ANYWHERE")
    assert tasks.sync_one(row.pk) == {"unreachable": 1}
    assert "NOT_SET_ANYWHERE is not set" in Cluster.objects.get(pk=row.pk).last_error
    assert first is not backends._cache.get("east")


def test_each_simulated_cluster_has_its_own_pods_and_nodes(lab, submit, go):
    from scheduling.services.cluster_config import node_group_set

    other = Cluster.objects.create(name="lab2", labels={"site": "lab2"})
    node_group_set(cluster=other, actor=lab.root, name="h", flavor=lab.a100, nodes=1, gpus_per_node=4)
    assert backends.get_backend("default") is not backends.get_backend("lab2")
    job = go(submit, lab.alice, gpus=4, cluster_selector={"site": "lab2"})
    from scheduling.services.cycle import run_cycle

    go(run_cycle)
    job.refresh_from_db()
    assert job.cluster == other and job.placement == ["h-0"]
    from scheduling.models import SimPod

    assert list(SimPod.objects.filter(job_id=job.pk).values_list("cluster", "gated")) == [("lab2", False)]


# ------------------------------------------------------------------------------------------- secrets


def test_credentials_never_reach_the_api_the_pages_or_the_logs(lab, api_server, tmp_path, client_for, caplog,
                                                              monkeypatch):
    from django.test import Client

    broken = tmp_path / "broken.kubeconfig"
    # A kubeconfig the client library cannot load, with the credential in it: its error must not be shown.
    broken.write_text(yaml.safe_dump({**kubeconfig(api_server.url), "contexts": TOKEN}))
    monkeypatch.setenv("WEST_KUBECONFIG", f"users: [{TOKEN}: [")  # not even YAML
    Cluster.objects.create(name="east", backend="kubernetes", kubeconfig=str(broken), context="east")
    Cluster.objects.create(name="west", backend="kubernetes", kubeconfig_env="WEST_KUBECONFIG")
    with caplog.at_level(logging.DEBUG):
        tasks.sync_cluster()
        tasks.reconcile()
    east, west = Cluster.objects.get(name="east"), Cluster.objects.get(name="west")
    assert not east.reachable and "could not be loaded" in east.last_error
    assert not west.reachable and "not valid YAML" in west.last_error
    admin = client_for(lab.root)
    seen = [admin.get("/api/v1/clusters").content.decode(), admin.get("/api/v1/clusters/east").content.decode(),
            client_for(lab.alice).get("/api/v1/clusters").content.decode(), caplog.text,
            str(list(AuditEntry.objects.values_list("old", "new")))]
    page = Client()
    page.force_login(lab.root)
    seen.append(page.get("/lab/clusters/").content.decode())
    assert "east" in seen[-1] and str(broken) in seen[0]  # the reference is shown to admins ...
    for text in seen:
        assert TOKEN not in text  # ... the credential nowhere
    # Researchers see names, labels and states, not even the references.
    assert "kubeconfig" not in seen[2] and str(broken) not in seen[2]


# ------------------------------------------------------------------------------------------- settings


GOOD = {"name": "east", "backend": "kubernetes", "kubeconfig": "/etc/portal/east.kubeconfig"}


@pytest.mark.parametrize("bad,field", [
    ({"labels": {"-bad": "x"}}, "labels"),
    ({"labels": {"region": "no spaces"}}, "labels"),
    ({"labels": {"Example.COM/x": "y"}}, "labels"),
    ({"labels": {"k": "x" * 64}}, "labels"),
    ({"labels": ["region=east"]}, "labels"),
    ({"state": "paused"}, "state"),
    ({"backend": "slurm"}, "backend"),
    ({"kubeconfig": "relative/path"}, "kubeconfig"),
    ({"kubeconfig_env": "1BAD-NAME"}, "kubeconfig_env"),
    ({"kubeconfig_env": "EAST_KUBECONFIG"}, "kubeconfig"),  # two ways to reach it at once
    ({"in_cluster": True}, "kubeconfig"),
    ({"namespace_template": "gpu-portal"}, "namespace_template"),
    ({"namespace_template": "gpu-{dept}"}, "namespace_template"),
    ({"namespace_template": "GPU_{department}"}, "namespace_template"),
    ({"cost_rank": 10_000}, "cost_rank"),
    ({"cost_rank": "cheap"}, "cost_rank"),
    ({"secret": "x"}, "secret"),
    ({"name": "Not A Slug"}, "name"),
])
def test_bad_cluster_settings_are_400_with_field_errors_and_write_nothing(lab, client_for, bad, field):
    before = (Cluster.objects.count(), AuditEntry.objects.count())
    r = client_for(lab.root).post("/api/v1/clusters", {**GOOD, **bad}, format="json")
    assert r.status_code == 400, r.content
    assert any(f == field or f.startswith(f"{field}.") for f in _fields(r)), r.json()
    assert (Cluster.objects.count(), AuditEntry.objects.count()) == before
    if field == "name":
        return
    r = client_for(lab.root).patch("/api/v1/clusters/default", {k: v for k, v in {**GOOD, **bad}.items()
                                                                if k != "name"}, format="json")
    assert r.status_code == 400
    assert Cluster.objects.get(name="default").backend == "simulated"


def test_cluster_settings_are_stored_audited_and_shown_to_admins(lab, client_for):
    body = {**GOOD, "labels": {"region": "east", "topology.kubernetes.io/zone": "e1"}, "cost_rank": 3,
            "namespace_template": "portal-{department}", "state": "cordoned"}
    r = client_for(lab.root).post("/api/v1/clusters", body, format="json")
    assert r.status_code == 201, r.content
    got = r.json()
    assert {k: got[k] for k in body} == body
    entry = AuditEntry.objects.get(action="cluster.create")
    assert entry.new["labels"] == body["labels"] and entry.new["kubeconfig"] == GOOD["kubeconfig"]
    r = client_for(lab.root).patch("/api/v1/clusters/east", {"state": "active", "comment": "open"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "active"
    assert AuditEntry.objects.get(action="cluster.update").new == {"state": "active"}
    snapshot, _ = build_snapshot(now=__import__("django.utils.timezone").utils.timezone.now())
    east = next(c for c in snapshot.clusters if c.name == "east")
    assert (east.state, east.cost_rank) == ("active", 3)
    from scheduling.services.jobs import namespace_for

    assert namespace_for("vision", Cluster.objects.get(name="east")) == "portal-vision"
    assert namespace_for("vision", Cluster.objects.get(name="default")) == "gpu-vision"


def test_the_cluster_page_registers_and_drains_a_cluster(lab):
    from django.test import Client

    c = Client()
    c.force_login(lab.root)
    r = c.post("/lab/clusters/", {"action": "cluster", "name": "east", "backend": "kubernetes",
                                 "kubeconfig": "/etc/portal/east.kubeconfig", "labels": "region=east, data=campus",
                                 "cost_rank": "2", "state": "active"})
    assert r.status_code == 302, r.content.decode()[-2000:]
    east = Cluster.objects.get(name="east")
    assert east.labels == {"region": "east", "data": "campus"} and east.cost_rank == 2
    r = c.post("/lab/clusters/", {"action": "state", "cluster": "east", "state": "draining"})
    assert r.status_code == 302 and Cluster.objects.get(name="east").state == "draining"
    r = c.post("/lab/clusters/", {"action": "cluster", "name": "west", "labels": "region", "kubeconfig": "rel"})
    assert r.status_code == 400 and not Cluster.objects.filter(name="west").exists()
    r = c.post("/lab/clusters/", {"action": "state", "cluster": "east", "state": "asleep"})
    assert r.status_code == 400 and Cluster.objects.get(name="east").state == "draining"
    page = c.get("/lab/clusters/").content.decode()
    assert "region=east" in page and "Reopen east" in page


# ------------------------------------------------------------------------------------------- job selectors


def test_jobs_take_required_and_preferred_cluster_labels(lab, client_for, payload):
    Cluster.objects.filter(name="default").update(labels={"data": "campus"})
    r = client_for(lab.alice).post("/api/v1/jobs", payload(cluster_selector={"data": "campus"},
                                                           cluster_preference={"cost": "low"}), format="json")
    assert r.status_code == 201, r.content
    assert r.json()["cluster_selector"] == {"data": "campus"} and r.json()["cluster_preference"] == {"cost": "low"}
    job = Job.objects.get(pk=r.json()["id"])
    snapshot, _ = build_snapshot(now=job.submitted_at)
    pending = next(p for p in snapshot.pending if p.id == job.pk)
    assert pending.cluster_selector == (("data", "campus"),) and pending.cluster_preference == (("cost", "low"),)
    q = client_for(lab.alice).post("/api/v1/jobs/quote", payload(cluster_selector={"data": "campus"}), format="json")
    assert q.status_code == 200 and q.json()["start"]["starts_now"] is True


@pytest.mark.parametrize("bad,field,code", [
    ({"cluster_selector": {"data": "nowhere"}}, "cluster_selector", "no_matching_cluster"),
    ({"cluster_selector": {"bad key": "x"}}, "cluster_selector", "invalid_label"),
    ({"cluster_selector": ["data=campus"]}, "cluster_selector", None),
    ({"cluster_preference": {"k": "-x-"}}, "cluster_preference", "invalid_label"),
    ({"cluster_preference": {"k": None}}, "cluster_preference", None),
])
def test_bad_cluster_labels_on_a_job_are_400_with_field_errors(lab, client_for, payload, bad, field, code):
    Cluster.objects.filter(name="default").update(labels={"data": "campus"})
    r = client_for(lab.alice).post("/api/v1/jobs", payload(**bad), format="json")
    assert r.status_code == 400, r.content
    errors = {k: v for k, v in _fields(r).items() if k == field or k.startswith(f"{field}.")}
    assert errors, r.json()
    if code:
        assert code in str(errors)
    assert not Job.objects.exists()


def test_the_submit_form_takes_cluster_labels(lab):
    from django.test import Client

    east = Cluster.objects.create(name="east", labels={"data": "s3"})
    # a cluster the selector matches must offer the flavor, or the submission is refused as one that never runs
    Node.objects.create(cluster=east, name="e0", flavor=lab.a100, gpus=8, labels={"gpu-type": "a100"})
    c = Client()
    c.force_login(lab.alice)
    form = {"name": "f", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python train.py",
            "flavor": "a100-80gb", "gpus": "1", "pods": "1", "cpu": "4", "memory": "16Gi", "tier": "elastic",
            "urgency": "normal", "task_type": "train", "max_runtime_s": "3600", "bid": "0"}
    assert "Required cluster labels" in c.get("/jobs/new").content.decode()
    r = c.post("/jobs/new", {**form, "cluster_selector": "data=s3", "cluster_preference": "zone=a, tier=cheap"})
    assert r.status_code == 302, r.content.decode()[-1500:]
    job = Job.objects.get()
    assert job.cluster_selector == {"data": "s3"} and job.cluster_preference == {"zone": "a", "tier": "cheap"}
    r = c.post("/jobs/new", {**form, "cluster_selector": "data"})
    assert r.status_code == 400 and Job.objects.count() == 1
