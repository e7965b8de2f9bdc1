"""Sessions that default to a fraction of a GPU (SESSION_DEFAULT_GPU_FRACTION, docs/fractions.md): applied to a
session on a flavor that shares its GPUs when it asks for no size of its own, and nowhere else."""

from __future__ import annotations

import pytest
from django.test import Client

from quotas.models import Flavor, GpuSharing, Quota
from scheduling.models import Job, Node, SessionImage

pytestmark = pytest.mark.django_db


@pytest.fixture
def shared(lab, settings):
    """a100-80gb shares its GPUs through HAMi, t4 as 4 replicas; sessions default to a quarter of a GPU."""
    settings.SESSION_DEFAULT_GPU_FRACTION = 0.25
    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    lab.t4 = Flavor.objects.create(name="t4", resource_name="nvidia.com/gpu", gpu_memory_gib=16,
                                   sharing=GpuSharing.REPLICAS, shared_resource_name="nvidia.com/gpu.shared",
                                   replicas_per_gpu=4, node_labels={"gpu-type": "t4"})
    Node.objects.create(cluster=lab.cluster, name="t0", flavor=lab.t4, gpus=2, labels={"gpu-type": "t4"})
    Quota.objects.create(department=lab.vision, flavor=lab.t4, nominal=1)
    Node.objects.create(cluster=lab.cluster, name="m0", flavor=lab.mig, gpus=2, labels={"gpu-type": "a100-mig"})
    SessionImage.objects.create(name="jupyterlab", label="JupyterLab", image="quay.io/jupyter/base-notebook:2026",
                                port=8888, readiness_path="/api/status", command=["start-notebook.py"])
    return lab


def session(**fields) -> dict:
    out = {"name": "nb", "kind": "session", "session_image": "jupyterlab", "flavor": "a100-80gb",
           "max_runtime_s": 14400}
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


def submitted(client_for, user, body) -> Job:
    r = client_for(user).post("/api/v1/jobs", body, format="json")
    assert r.status_code == 201, r.json()
    return Job.objects.get(pk=r.json()["id"])


@pytest.mark.parametrize("gpus", [None, 1])
def test_a_session_on_a_hami_flavor_gets_the_default_share_of_its_memory(shared, client_for, gpus):
    job = submitted(client_for, shared.alice, session(gpus=gpus))
    assert (job.gpus_per_pod, job.gpu_memory_mib, job.gpu_cores, job.share_milli) == (1, 20 * 1024, 0, 250)


def test_the_hami_memory_is_rounded_to_a_whole_gib(shared, client_for, settings):
    settings.SESSION_DEFAULT_GPU_FRACTION = 0.1  # 8 GiB of 80
    assert submitted(client_for, shared.alice, session()).gpu_memory_mib == 8 * 1024
    settings.SESSION_DEFAULT_GPU_FRACTION = 0.33  # 26.4 GiB -> 26
    assert submitted(client_for, shared.alice, session(name="nb2")).gpu_memory_mib == 26 * 1024


@pytest.mark.parametrize(("share", "replicas"), [(0.25, 1), (0.3, 2), (0.5, 2), (0.9, 4)])
def test_a_session_on_a_replicas_flavor_gets_the_replicas_that_cover_the_share(shared, client_for, settings,
                                                                               share, replicas):
    settings.SESSION_DEFAULT_GPU_FRACTION = share
    job = submitted(client_for, shared.alice, session(flavor="t4"))
    assert (job.gpus_per_pod, job.gpu_replicas, job.share_milli) == (1, replicas, replicas * 250)


def test_not_applied_on_a_flavor_that_does_not_share(shared, client_for):
    shared.a100.sharing = ""
    shared.a100.save()
    job = submitted(client_for, shared.alice, session(gpus=1))
    assert (job.gpus_per_pod, job.share_milli, job.gpu_memory_mib) == (1, 0, 0)


def test_not_applied_to_a_batch_job(shared, client_for):
    job = submitted(client_for, shared.alice, {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                               "command": ["python", "train.py"], "flavor": "a100-80gb",
                                               "gpus": 1})
    assert (job.gpus_per_pod, job.share_milli) == (1, 0)


def test_not_applied_when_several_gpus_are_asked(shared, client_for):
    job = submitted(client_for, shared.alice, session(gpus=2))
    assert (job.gpus_per_pod, job.share_milli, job.gpu_memory_mib) == (2, 0, 0)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"gpu_memory_gib": 40}, (40 * 1024, 0, 500)),
    ({"gpu_memory_gib": 8, "gpu_cores": 30}, (8 * 1024, 30, 300)),
])
def test_a_fraction_of_its_own_is_kept(shared, client_for, fields, expected):
    job = submitted(client_for, shared.alice, session(**fields))
    assert (job.gpu_memory_mib, job.gpu_cores, job.share_milli) == expected


def test_a_bad_fraction_of_its_own_is_still_refused(shared, client_for):
    r = client_for(shared.alice).post("/api/v1/jobs", session(gpu_cores=20), format="json")
    assert r.status_code == 400 and "gpu_memory_gib" in r.json()["error"]["fields"]
    assert not Job.objects.exists()


def test_off_when_the_setting_is_empty(shared, client_for, settings):
    settings.SESSION_DEFAULT_GPU_FRACTION = None
    job = submitted(client_for, shared.alice, session(gpus=1))
    assert (job.gpus_per_pod, job.share_milli, job.gpu_memory_mib) == (1, 0, 0)


def test_the_quote_uses_the_default(shared, client_for):
    r = client_for(shared.alice).post("/api/v1/jobs/quote", session(), format="json")
    assert r.status_code == 200, r.json()
    assert r.json()["gpus_total"] == 0.25


FORM = {"name": "nb", "kind": "session", "session_image": "jupyterlab", "flavor": "a100-80gb", "gpus": "1",
        "cpu": "4", "memory": "16Gi", "tier": "realtime", "urgency": "normal", "task_type": "train",
        "max_runtime_s": "3600", "bid": "0"}


def test_the_session_form_says_the_default_and_applies_it(shared, settings):
    c = Client()
    c.force_login(shared.alice)
    html = c.get("/jobs/new").content.decode()
    assert "gets 0.25 of a GPU" in html and "a100-80gb: 20 GiB" in html and "t4: 1 of 4 replicas" in html
    r = c.post("/jobs/new", FORM)
    assert r.status_code == 302, r.content.decode()[-1500:]
    assert Job.objects.get().share_milli == 250
    settings.SESSION_DEFAULT_GPU_FRACTION = None
    assert "session-fraction-default" not in c.get("/jobs/new").content.decode()
