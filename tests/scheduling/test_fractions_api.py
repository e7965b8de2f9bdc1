"""Fractional GPUs through the portal (docs/fractions.md): a fraction asked for through the API on a flavor that
shares its GPUs, a 400 per bad input, and two fractions admitted onto one GPU by the cycle."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from quotas.models import Flavor, GpuSharing, Quota
from scheduling.models import Job, JobState, Node, Preemption, PreemptionVictim, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def shared(lab):
    """The lab's a100-80gb shares its GPUs through HAMi; a t4 flavor shares them as 4 time-slicing replicas."""
    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    lab.t4 = Flavor.objects.create(name="t4", resource_name="nvidia.com/gpu", gpu_memory_gib=16,
                                   sharing=GpuSharing.REPLICAS, shared_resource_name="nvidia.com/gpu.shared",
                                   replicas_per_gpu=4, node_labels={"gpu-type": "t4"})
    Node.objects.create(cluster=lab.cluster, name="t0", flavor=lab.t4, gpus=2, labels={"gpu-type": "t4"})
    Quota.objects.create(department=lab.vision, flavor=lab.t4, nominal=1)
    Node.objects.create(cluster=lab.cluster, name="m0", flavor=lab.mig, gpus=2, labels={"gpu-type": "a100-mig"})
    return lab


def body(**fields) -> dict:
    out = {"name": "nb", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "nb.py"],
           "flavor": "a100-80gb"}
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


def post(client_for, user, **fields):
    return client_for(user).post("/api/v1/jobs", body(**fields), format="json")


def test_a_memory_fraction_is_stored_with_its_share(shared, client_for):
    r = post(client_for, shared.alice, gpu_memory_gib=20, gpu_cores=30)
    assert r.status_code == 201, r.json()
    job = Job.objects.get(pk=r.json()["id"])
    assert (job.gpus_per_pod, job.gpu_memory_mib, job.gpu_cores, job.share_milli) == (1, 20 * 1024, 30, 300)
    assert r.json()["fraction"] == {"gpu_memory_gib": 20.0, "gpu_cores": 30, "gpu_replicas": None, "share": 0.3}
    assert job.gpu_share == 0.3


def test_replicas_on_a_replica_flavor(shared, client_for):
    r = post(client_for, shared.alice, flavor="t4", gpu_replicas=1)
    assert r.status_code == 201, r.json()
    assert Job.objects.get(pk=r.json()["id"]).share_milli == 250


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"flavor": "a100-mig-3g.40gb", "gpu_memory_gib": 10}, "gpu_memory_gib", "does not share"),
    ({"gpu_memory_gib": 81}, "gpu_memory_gib", "more than one GPU"),
    ({"gpu_memory_gib": 10, "gpus": 2}, "gpus", "1 GPU per pod"),
    ({"gpu_memory_gib": 10, "gpu_cores": 0}, "gpu_cores", ""),
    ({"gpu_memory_gib": 10, "gpu_cores": 101}, "gpu_cores", ""),
    ({"flavor": "t4", "gpu_replicas": 5}, "gpu_replicas", "more than one GPU"),
    ({"flavor": "t4", "gpu_memory_gib": 4}, "gpu_memory_gib", "gpu_replicas"),
    ({"gpu_replicas": 1}, "gpu_replicas", "by memory"),
    ({"gpu_cores": 20}, "gpu_memory_gib", "Required"),
    ({"flavor": "t4", "gpus": 1}, "gpus", "gpu_replicas"),
    # a resize adds whole pods on whole GPUs: a fraction keeps its size
    ({"gpu_memory_gib": 10, "pods": 2, "min_pods": 1, "checkpoint_interval_s": 600}, "min_pods", "whole GPUs"),
])
def test_a_bad_fraction_is_a_400_on_its_field(shared, client_for, fields, field, words):
    r = post(client_for, shared.alice, **fields)
    assert r.status_code == 400, r.json()
    fields_ = r.json()["error"]["fields"]
    assert field in fields_, fields_
    assert words in str(fields_[field])
    assert not Job.objects.exists()


def test_a_fraction_on_a_cpu_pool_is_a_400(shared, client_for):
    from quotas.models import FlavorKind
    Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    Node.objects.create(cluster=shared.cluster, name="c0", flavor=Flavor.objects.get(name="cpu"), gpus=0,
                        cpu_millicores=16000, memory_mib=65536)
    r = post(client_for, shared.alice, flavor="cpu", gpus=0, gpu_memory_gib=4)
    assert r.status_code == 400
    assert "CPU pool" in str(r.json()["error"]["fields"]["gpu_memory_gib"])


def test_two_notebooks_share_one_gpu(shared, client_for, go):
    # every GPU but one is busy with whole-GPU work: the two quarters must share the last one
    ids = [post(client_for, shared.alice, name=f"nb{i}", gpu_memory_gib=20).json()["id"] for i in range(2)]
    whole = post(client_for, shared.bob, name="whole", gpus=4, pods=1).json()["id"]
    three = post(client_for, shared.bob, name="three", gpus=3, pods=1).json()["id"]
    go(run_cycle)
    jobs = {j.pk: j for j in Job.objects.all()}
    assert all(jobs[i].state != JobState.QUEUED for i in ids + [whole, three])
    assert jobs[ids[0]].placement == jobs[ids[1]].placement
    assert jobs[ids[0]].gpu_devices == jobs[ids[1]].gpu_devices == [0]
    # the cluster page draws that GPU once, shared, with what it holds; the metrics count it
    from django.test import Client

    c = Client()
    c.force_login(shared.root)
    html = c.get("/cluster/").content.decode()
    assert html.count('data-kind="shared"') == 1
    assert 'data-used="0.5"' in html and f"job {ids[0]} nb0 (0.25 GPU)" in html
    assert "1 shared" in html
    metrics = Client().get("/metrics").content.decode()
    assert 'portal_gpus_shared{flavor="a100-80gb"} 1.0' in metrics
    assert 'portal_gpus_shared_used{flavor="a100-80gb"} 0.5' in metrics
    page = c.get(f"/jobs/{ids[0]}/").content.decode()
    assert "0.25 GPU (20 GiB)" in page and "shared GPU 0" in page


def test_a_realtime_job_evicts_a_fraction_alone_on_its_gpu(shared, client_for, go):
    # nlp holds 7 GPUs whole and the last with a quarter, all for two hours: vision's realtime job evicts the
    # quarter, which frees a whole GPU and loses the least work
    nb = post(client_for, shared.bob, name="nb", gpu_memory_gib=20).json()["id"]
    whole = [post(client_for, shared.bob, name=f"w{g}", gpus=g).json()["id"] for g in (4, 3)]
    go(run_cycle)
    go(sync_cluster)
    assert set(Job.objects.filter(state=JobState.RUNNING).values_list("pk", flat=True)) == {nb, *whole}
    two_hours_ago = timezone.now() - timedelta(hours=2)
    Job.objects.filter(pk__in=[nb, *whole]).update(started_at=two_hours_ago)
    SimPod.objects.filter(phase="Running").update(started_at=two_hours_ago)
    r = post(client_for, shared.alice, name="rt", tier="realtime", gpus=1)
    assert r.status_code == 201, r.json()
    rt = r.json()["id"]
    go(run_cycle)
    assert list(PreemptionVictim.objects.values_list("job_id", flat=True)) == [nb]
    assert Preemption.objects.get().preemptor_id == rt


FORM = {"name": "nb", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python nb.py",
        "flavor": "a100-80gb", "gpus": "1", "pods": "1", "cpu": "4", "memory": "16Gi", "tier": "elastic",
        "urgency": "normal", "task_type": "train", "max_runtime_s": "3600", "bid": "0"}


def test_the_submit_form_takes_a_fraction_and_says_what_is_wrong(shared):
    from django.test import Client

    c = Client()
    c.force_login(shared.alice)
    assert "GPU memory (GiB)" in c.get("/jobs/new").content.decode()
    r = c.post("/jobs/new", {**FORM, "gpu_memory_gib": "10", "gpu_cores": "20"})
    assert r.status_code == 302, r.content.decode()[-1500:]
    job = Job.objects.get()
    assert (job.gpu_memory_mib, job.gpu_cores, job.share_milli) == (10 * 1024, 20, 200)
    r = c.post("/jobs/new", {**FORM, "gpu_memory_gib": "100"})
    assert r.status_code == 400 and "more than one GPU" in r.content.decode()
    assert Job.objects.count() == 1


def test_the_what_if_replays_a_fraction_as_one(shared, client_for):
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.services import whatif

    r = post(client_for, shared.alice, gpu_memory_gib=20)
    start = timezone.now() - timedelta(hours=2)
    Job.objects.filter(pk=r.json()["id"]).update(state=JobState.SUCCEEDED, submitted_at=start, started_at=start,
                                                 finished_at=start + timedelta(minutes=30))
    [row] = whatif.export_rows(since=timezone.now() - timedelta(days=1))
    assert (row.gpu_fraction, row.total_gpus) == (0.25, 1)


def test_a_clone_or_template_of_a_fraction_asks_for_the_same_fraction(shared, client_for):
    from scheduling.services.templates import spec_of_job

    r = post(client_for, shared.alice, gpu_memory_gib=20, gpu_cores=30)
    spec = spec_of_job(Job.objects.get(pk=r.json()["id"]))
    assert (spec["gpu_memory_gib"], spec["gpu_cores"], spec["gpus"]) == (20.0, 30, 1)
    again = client_for(shared.alice).post("/api/v1/jobs", {**spec, "name": "nb-again"}, format="json")
    assert again.status_code == 201, again.json()
    assert Job.objects.get(pk=again.json()["id"]).share_milli == 300


def test_two_notebook_sessions_share_one_gpu_and_are_quoted_a_quarter(shared, client_for, go):
    from quotas.models import Price
    from scheduling.models import SessionImage

    SessionImage.objects.create(name="jupyterlab", label="JupyterLab", image="quay.io/jupyter/base-notebook:2026",
                                port=8888, readiness_path="/api/status", command=["start-notebook.py"])
    Price.objects.create(flavor=shared.a100, tier="realtime", per_gpu_hour=3000)
    c = client_for(shared.alice)
    nb = {"name": "nb", "kind": "session", "session_image": "jupyterlab", "flavor": "a100-80gb",
          "gpu_memory_gib": 20, "max_runtime_s": 14400}
    quote = c.post("/api/v1/jobs/quote", nb, format="json")
    assert quote.status_code == 200, quote.json()
    assert quote.json()["gpus_total"] == 0.25 and quote.json()["estimated_cost"] == 3000  # 0.25 x 3 cr/h x 4 h
    ids = [c.post("/api/v1/jobs", {**nb, "name": f"nb{i}"}, format="json").json()["id"] for i in range(2)]
    go(run_cycle)
    jobs = [Job.objects.get(pk=i) for i in ids]
    assert all(j.state != JobState.QUEUED for j in jobs), [j.reason_message for j in jobs]
    assert jobs[0].placement == jobs[1].placement and jobs[0].gpu_devices == jobs[1].gpu_devices
