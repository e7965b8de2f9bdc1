"""The right-sizer recommends a fraction of a GPU where a job's measured use fits in one (docs/fractions.md): the
size (peak GPU memory and busy share, each with 20% headroom), its price against the whole GPUs, in the API, the
quote and the job page; nothing where the flavor does not share its GPUs or the job needs more than half a GPU."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from observability.models import AttemptUsage
from observability.services.rightsizing import fraction_fit, learn
from quotas.models import Flavor, GpuSharing, Price
from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db


@pytest.fixture
def shared(lab):
    """a100-80gb shares its GPUs through HAMi and costs 4 credits a GPU-hour; t4 shares as 4 replicas."""
    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    Price.objects.update_or_create(flavor=lab.a100, tier="elastic", defaults={"per_gpu_hour": 4000})
    lab.t4 = Flavor.objects.create(name="t4", resource_name="nvidia.com/gpu", gpu_memory_gib=16,
                                   sharing=GpuSharing.REPLICAS, shared_resource_name="nvidia.com/gpu.shared",
                                   replicas_per_gpu=4, node_labels={"gpu-type": "t4"})
    return lab


def _notebook(lab, *, busy: float, mem_mib: float, name="notebook-1", kind="session", state=JobState.SUCCEEDED,
              learnt=True) -> Job:
    now = timezone.now()
    job = Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name=name, kind=kind,
                             image="jupyter:1", command=["x"], gpus_per_pod=1, state=state, finished_at=now)
    usage = AttemptUsage.objects.create(job=job, attempt=1, source="prometheus", gpus=1, samples=30,
                                        started_at=now - timedelta(hours=2), ended_at=now, busy_gpus=busy,
                                        peak_memory_mib=mem_mib, mean_util=busy * 100, final=True)
    if learnt:
        learn(usage, succeeded=True)
    return job


@pytest.mark.parametrize(("busy", "mem_mib", "held", "expected"), [
    (0.05, 9 * 1024, 1, ("hami", 11, None, 0.138)),  # 9 GiB x1.2 -> 11 GiB of 80
    (0.30, 8 * 1024, 1, ("hami", 10, 36, 0.36)),  # compute outgrows memory: a compute share is asked for
    (0.05, 40000, 1, None),  # 47 GiB: more than half the GPU, keep a whole one
    (0.90, 4 * 1024, 1, None),  # one busy GPU
    (1.30, 4 * 1024, 4, None),  # needs two GPUs
    (0.05, None, 1, None),  # memory not measured
])
def test_the_fraction_of_a_hami_gpu(shared, busy, mem_mib, held, expected):
    fit = fraction_fit(peak_memory_mib=mem_mib, busy_gpus=busy, gpus_held=held, flavor=shared.a100)
    got = None if fit is None else (fit.mechanism, fit.gpu_memory_gib, fit.gpu_cores, fit.share)
    assert got == expected


def test_the_fraction_in_replicas_and_none_on_a_flavor_that_does_not_share(shared):
    fit = fraction_fit(peak_memory_mib=3000, busy_gpus=0.1, gpus_held=1, flavor=shared.t4)
    assert (fit.mechanism, fit.gpu_replicas, fit.share, fit.request_text) == ("replicas", 1, 0.25, "1 replica")
    assert fraction_fit(peak_memory_mib=3000, busy_gpus=0.1, gpus_held=1, flavor=shared.mig) is None


def test_the_api_prices_the_fraction_against_the_whole_gpu(shared, client_for):
    for _ in range(3):
        _notebook(shared, busy=0.05, mem_mib=9 * 1024)
    c = client_for(shared.alice)
    body = c.get("/api/v1/recommendations", {"name": "notebook-2", "flavor": "a100-80gb"}).json()
    fraction = body["fraction"]
    assert (fraction["source"], fraction["share"], fraction["gpu_memory_gib"]) == ("dcgm", 0.138, 11)
    assert fraction["whole_credits_per_hour"] == 4.0
    assert fraction["credits_per_hour"] == pytest.approx(0.552, abs=0.001)
    assert fraction["text"] == ("notebook-* used 9 GB at most: 0.138 GPU (11 GiB) would cost 0.6 credits an hour "
                                "instead of 4.0")
    # without a flavor, or on one that does not share its GPUs, no fraction
    assert c.get("/api/v1/recommendations", {"name": "notebook-2"}).json()["fraction"] is None
    assert c.get("/api/v1/recommendations", {"name": "notebook-2", "flavor": shared.mig.name}).json()["fraction"] \
        is None


@pytest.mark.parametrize(("params", "field"), [
    ({"name": "notebook-2", "flavor": "no-such-flavor"}, "flavor"),
    ({"name": "notebook-2", "flavor": "a100-80gb", "tier": "gold"}, "tier"),
])
def test_bad_flavor_or_tier_is_a_400(shared, client_for, params, field):
    r = client_for(shared.alice).get("/api/v1/recommendations", params)
    assert r.status_code == 400 and field in r.json()["error"]["fields"]


def test_the_quote_recommends_the_fraction(shared, client_for):
    for _ in range(3):
        _notebook(shared, busy=0.05, mem_mib=9 * 1024)
    body = {"name": "notebook-7", "image": "jupyter:1", "command": ["x"], "flavor": "a100-80gb", "gpus": 1,
            "max_runtime_s": 3600}
    quote = client_for(shared.alice).post("/api/v1/jobs/quote", body, format="json").json()
    assert quote["recommendation"]["fraction"]["share"] == 0.138
    assert "instead of 4.0" in quote["recommendation"]["fraction"]["text"]


def test_the_job_page_says_the_notebook_fits_a_fraction(shared, client_for):
    job = _notebook(shared, busy=0.05, mem_mib=9 * 1024, learnt=False)
    c = client_for(shared.alice)
    hints = {h["code"]: h for h in c.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()["hints"]}
    assert hints["fits_fraction"]["advice"].startswith("This notebook used 9 GB at most: 0.138 GPU (11 GiB)")
    browser = Client()
    browser.force_login(shared.alice)
    page = browser.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-hint="fits_fraction"' in page
    # a job that keeps its GPU busy gets no such hint
    busy = _notebook(shared, busy=0.95, mem_mib=9 * 1024, learnt=False, name="train-1", kind="batch")
    assert "fits_fraction" not in {h["code"] for h in c.get(f"/api/v1/jobs/{busy.pk}/gpu-usage").json()["hints"]}


def test_the_submit_forms_quote_shows_the_fraction(shared):
    for _ in range(3):
        _notebook(shared, busy=0.05, mem_mib=9 * 1024)
    browser = Client()
    browser.force_login(shared.alice)
    html = browser.post("/jobs/new/quote", {"name": "notebook-7", "image": "jupyter:1", "command": "x",
                                            "flavor": "a100-80gb", "gpus": "1", "max_runtime_s": "3600"}).content.decode()
    assert 'data-quote="fraction"' in html
    assert "Notebook-* used 9 GB at most: 0.138 GPU (11 GiB) would cost 0.6 credits an hour instead of 4.0" in html
