"""Topology levels in the portal: a cluster declares them (API, lab file), a job requires or prefers one (400s
for an unknown level, a level no cluster it may run on declares, a gang larger than any domain), and the cycle
places a required gang within one domain of the simulated cluster's node groups."""

from __future__ import annotations

import pytest

from quotas.models import Quota
from scheduling.models import Job, Node

pytestmark = pytest.mark.django_db

BLOCK, RACK, HOST = "topology.kubernetes.io/block", "topology.kubernetes.io/rack", "kubernetes.io/hostname"


def error_fields(r) -> dict:
    assert r.status_code == 400, r.content
    return {k: [e["code"] for e in errs] for k, errs in r.json()["error"]["fields"].items()}


@pytest.fixture
def racked(lab):
    """The lab's cluster with two racks of two 4-GPU nodes each (n0, n1 in r0; m0, m1 in r1) and levels."""
    lab.cluster.topology_levels = [BLOCK, RACK, HOST]
    lab.cluster.save(update_fields=["topology_levels"])
    for node in lab.nodes:
        node.labels = {**node.labels, BLOCK: "b0", RACK: "r0"}
        node.save(update_fields=["labels"])
    for i in range(2):
        Node.objects.create(cluster=lab.cluster, name=f"m{i}", flavor=lab.a100, gpus=4,
                            labels={"gpu-type": "a100", BLOCK: "b0", RACK: "r1"})
    Quota.objects.filter(department=lab.vision).update(borrowing_limit=None)
    return lab


def test_a_job_names_a_level_by_its_last_part_and_keeps_its_key(racked, client_for, payload):
    r = client_for(racked.alice).post("/api/v1/jobs", payload(gpus=4, pods=2, topology_level="rack",
                                                               topology_required=True), format="json")
    assert r.status_code == 201, r.content
    assert r.json()["topology_level"] == RACK and r.json()["topology_required"] is True
    assert Job.objects.get().topology_level == RACK


def test_an_unknown_level_is_a_400(racked, client_for, payload):
    r = client_for(racked.alice).post("/api/v1/jobs", payload(gpus=4, topology_level="row"), format="json")
    assert error_fields(r) == {"topology_level": ["unknown_level"]}
    assert RACK in r.json()["error"]["fields"]["topology_level"][0]["message"]
    assert Job.objects.count() == 0


def test_a_level_on_a_cluster_without_levels_is_a_400(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(gpus=4, pods=2, topology_level="rack",
                                                           topology_required=True), format="json")
    assert error_fields(r) == {"topology_level": ["unknown_level"]}
    assert "no cluster it may run on declares topology levels" in r.json()["error"]["fields"]["topology_level"][0][
        "message"]


def test_a_required_gang_larger_than_any_domain_is_a_400(racked, client_for, payload):
    # 12 GPUs fit the cluster (16) but no rack (8)
    r = client_for(racked.alice).post("/api/v1/jobs", payload(gpus=4, pods=3, topology_level="rack",
                                                               topology_required=True), format="json")
    assert error_fields(r) == {"topology_level": ["exceeds_largest_domain"]}
    assert "never fit in one rack: the largest has 8 GPUs" in r.json()["error"]["fields"]["topology_level"][0][
        "message"]
    # preferred, the same gang is taken: it spreads when no rack holds it
    r = client_for(racked.alice).post("/api/v1/jobs", payload(gpus=4, pods=3, topology_level="rack"), format="json")
    assert r.status_code == 201, r.content


def test_required_without_a_level_is_a_400(racked, client_for, payload):
    r = client_for(racked.alice).post("/api/v1/jobs", payload(gpus=4, topology_required=True), format="json")
    assert error_fields(r) == {"topology_level": ["required"]}


def test_cluster_levels_are_validated_and_shown(lab, client_for):
    c = client_for(lab.root)
    r = c.patch("/api/v1/clusters/default", {"topology_levels": ["rack", "rack"]}, format="json")
    assert error_fields(r) == {"topology_levels": ["invalid"]}
    r = c.patch("/api/v1/clusters/default", {"topology_levels": ["Bad Key/x"]}, format="json")
    assert error_fields(r) == {"topology_levels": ["invalid"]}
    r = c.patch("/api/v1/clusters/default", {"topology_levels": [RACK, "example.com/rack"]}, format="json")
    assert error_fields(r) == {"topology_levels": ["invalid"]}  # two levels a job would name "rack"
    r = c.patch("/api/v1/clusters/default", {"topology_levels": [BLOCK, RACK, HOST]}, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["topology_levels"] == [BLOCK, RACK, HOST]
    seen = client_for(lab.alice).get("/api/v1/clusters").json()
    rows = seen["results"] if isinstance(seen, dict) else seen
    assert rows[0]["topology_levels"] == [BLOCK, RACK, HOST]


def test_the_cycle_places_a_required_gang_in_one_rack(racked, client_for, payload, go):
    from scheduling.services.cycle import run_cycle

    Quota.objects.filter(department=racked.vision).update(nominal=16)
    c = client_for(racked.alice)
    # two 1-GPU jobs go to rack r1 (best fit: the second joins the first), so r0 stays whole for the gang
    for _ in range(2):
        assert c.post("/api/v1/jobs", payload(gpus=1), format="json").status_code == 201
    go(run_cycle)
    assert sorted(p for j in Job.objects.all() for p in j.placement) == ["m0", "m0"]
    r = c.post("/api/v1/jobs", payload(gpus=4, pods=2, topology_level="rack", topology_required=True), format="json")
    go(run_cycle)
    gang = Job.objects.get(pk=r.json()["id"])
    assert sorted(gang.placement) == ["n0", "n1"]


def test_the_cycle_says_why_a_required_gang_waits(racked, client_for, payload, go):
    from scheduling.services.cycle import run_cycle

    Quota.objects.filter(department=racked.vision).update(nominal=16)
    # a GPU held by others (pods the portal does not own, for as long as the engine can tell) on one node of each
    # rack: 14 GPUs free in all, room for a 4-GPU pod once per rack
    Node.objects.filter(name__in=["n0", "m0"]).update(used_by_others=1)
    c = client_for(racked.alice)
    r = c.post("/api/v1/jobs", payload(gpus=4, pods=2, topology_level="rack", topology_required=True), format="json")
    go(run_cycle)
    gang = Job.objects.get(pk=r.json()["id"])
    assert gang.state == "queued" and gang.reason_code == "exceeds_capacity"
    assert "no rack ever has 8 GPUs; the largest has 4" in gang.reason_message
    # preferred, the same gang spreads over the racks
    r = c.post("/api/v1/jobs", payload(gpus=4, pods=2, topology_level="rack"), format="json")
    go(run_cycle)
    spread = Job.objects.get(pk=r.json()["id"])
    assert sorted(spread.placement) == ["m1", "n1"]


FORM = {"name": "f", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python train.py",
        "flavor": "a100-80gb", "gpus": "4", "pods": "2", "cpu": "4", "memory": "16Gi", "tier": "elastic",
        "urgency": "normal", "task_type": "train", "max_runtime_s": "3600", "bid": "0"}


def test_the_submit_form_takes_a_level_and_says_what_is_wrong(racked):
    from django.test import Client

    c = Client()
    c.force_login(racked.alice)
    page = c.get("/jobs/new").content.decode()
    assert "topology_level" in page and RACK in page
    r = c.post("/jobs/new", {**FORM, "topology_level": "rack", "topology_required": "on"})
    assert r.status_code == 302, r.content.decode()[-1500:]
    job = Job.objects.get()
    assert (job.topology_level, job.topology_required) == (RACK, True)
    r = c.post("/jobs/new", {**FORM, "topology_level": "row"})
    assert r.status_code == 400 and "Unknown topology level" in r.content.decode()
    assert Job.objects.count() == 1
    # the job's page says it
    assert f"within one <code>{RACK}</code> (required)" in c.get(f"/jobs/{job.pk}/").content.decode()


def test_a_clone_and_a_template_keep_the_level(racked, client_for, payload):
    from scheduling.services.templates import spec_of_job

    r = client_for(racked.alice).post("/api/v1/jobs", payload(gpus=4, pods=2, topology_level="rack"), format="json")
    spec = spec_of_job(Job.objects.get(pk=r.json()["id"]))
    assert (spec["topology_level"], spec["topology_required"]) == (RACK, False)
    assert client_for(racked.alice).post("/api/v1/jobs", spec, format="json").status_code == 201


def test_the_cluster_page_shows_the_racks_and_a_spread_gang_says_so(racked, client_for, payload, go):
    from django.test import Client

    from scheduling.models import JobEvent
    from scheduling.services.cycle import run_cycle

    Quota.objects.filter(department=racked.vision).update(nominal=16)
    Node.objects.filter(name__in=["n0", "m0"]).update(used_by_others=1)
    r = client_for(racked.alice).post("/api/v1/jobs", payload(gpus=4, pods=2), format="json")
    go(run_cycle)
    event = JobEvent.objects.filter(job_id=r.json()["id"], to_state="admitted").get()
    assert "its pods span several racks (no rack had room for all of them)" in event.message
    c = Client()
    c.force_login(racked.alice)
    page = c.get("/cluster/").content.decode()
    assert 'id="domains"' in page
    # r0: n0 (3 free: one held by others), n1 now holds a pod; 8 GPUs in all
    assert (f'<td title="{RACK}">rack</td><td>a100-80gb</td><td>r0</td><td>2</td><td>8</td><td>3</td><td>0</td>'
            in page)


def test_the_quote_knows_a_required_gang_waits_for_a_rack(racked, client_for, payload):
    Quota.objects.filter(department=racked.vision).update(nominal=16)
    Node.objects.filter(name__in=["n0", "m0"]).update(used_by_others=1)
    c = client_for(racked.alice)
    required = c.post("/api/v1/jobs/quote", payload(gpus=4, pods=2, topology_level="rack", topology_required=True),
                      format="json").json()["start"]
    preferred = c.post("/api/v1/jobs/quote", payload(gpus=4, pods=2, topology_level="rack"), format="json").json()[
        "start"]
    assert preferred["starts_now"] is True
    assert required["starts_now"] is False and required["code"] == "exceeds_capacity"
