"""TensorBoard as a source of the right-sizer (docs/fractions.md): the peak GPU memory a job logs into its
checkpoint directory is read when its attempt ends, wherever the portal can read that directory (the simulated
cluster's volumes; a Kubernetes cluster's sources the workers mount, CHECKPOINT_READ_MOUNTS), becomes the
recommendation's source named as such, and where it cannot be read the job page says why."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from observability.models import AttemptUsage, UsageHistory
from observability.services import collect as collect_service
from observability.services.simulated import SimulatedSource
from quotas.models import GpuSharing, Price
from scheduling import backends
from scheduling.backends.simulated import volume_dir
from scheduling.models import Job, JobState
from tests.fakes.k8s_fixtures import kube_fake, sleeps  # noqa: F401 - fixtures
from workloads.models import CheckpointDir, DataSource

pytestmark = pytest.mark.django_db
pytest.importorskip("tensorboard")

GIB = 1024**3


def _log_peak(directory, *, tag="memory/max_memory_allocated", values=(2 * GIB, 11 * GIB, 9 * GIB)) -> None:
    """What a training script's ``SummaryWriter.add_scalar(tag, torch.cuda.max_memory_allocated(), step)``
    leaves, written by the tensorboard package's own writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    directory.mkdir(parents=True, exist_ok=True)
    w = EventFileWriter(str(directory))
    for step, v in enumerate(values):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=v)])
        w.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    w.close()


@pytest.fixture
def scratch(lab, settings, tmp_path):
    settings.DATA_DIR = str(tmp_path / "var")
    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    Price.objects.update_or_create(flavor=lab.a100, tier="elastic", defaults={"per_gpu_hour": 4000})
    return DataSource.objects.create(name="vision-scratch", cluster=lab.cluster, department=lab.vision,
                                     claim_name="vision-scratch", writable=True, sub_path="jobs")


def _ended(lab, source, *, name="notebook-1", profile="idle") -> Job:
    """A job of 1 whole GPU whose attempt ran 20 minutes and just ended, with its checkpoint directory, and the
    collector's record of the attempt not yet closed."""
    now = timezone.now()
    job = Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name=name, image="jupyter:1",
                             command=["x"], gpus_per_pod=1, state=JobState.SUCCEEDED, kind="session",
                             started_at=now - timedelta(minutes=20), finished_at=now,
                             env={"SIM_GPU_PROFILE": profile})
    CheckpointDir.objects.create(job=job, source=source, sub_path=f"jobs/checkpoints/job-{job.pk}")
    AttemptUsage.objects.create(job=job, attempt=1, source="simulated", gpus=1, started_at=job.started_at)
    return job


def _page(lab, job) -> str:
    c = Client()
    c.force_login(lab.alice)
    return c.get(f"/jobs/{job.pk}/").content.decode()


def _collect() -> AttemptUsage:
    out = collect_service.collect(src=SimulatedSource())
    assert out.finalized == 1
    return AttemptUsage.objects.get(attempt=1, final=True)


def test_a_peak_logged_to_tensorboard_becomes_the_recommendations_source(scratch, lab, client_for):
    job = _ended(lab, scratch)
    _log_peak(volume_dir("default/vision-scratch", f"jobs/checkpoints/job-{job.pk}") / "run-1")
    usage = _collect()
    assert usage.tensorboard_peak_mib == 11 * 1024
    assert usage.tensorboard_note == "peak 11.0 GiB (memory/max_memory_allocated) in 1 event file"
    # the simulated notebook's GPU showed 6.4 GiB (8% of 80); the allocator's own peak is larger and is taken
    assert usage.peak_memory_mib < 11 * 1024
    history = UsageHistory.objects.get(owner=lab.alice, key="name:notebook-*")
    assert (history.peak_memory_mib, history.peak_memory_source) == (11 * 1024, "tensorboard")
    c = client_for(lab.alice)
    fraction = c.get("/api/v1/recommendations", {"name": "notebook-2", "flavor": lab.a100.name}).json()["fraction"]
    assert (fraction["source"], fraction["gpu_memory_gib"]) == ("tensorboard", 14)  # 11 GiB x1.2, rounded up
    body = c.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()
    hint = next(h for h in body["hints"] if h["code"] == "fits_fraction")
    assert hint["data"]["source"] == "tensorboard" and "used 11 GB at most" in hint["advice"]
    assert body["attempts"][0]["tensorboard_peak_mib"] == 11 * 1024
    assert "peak 11.0 GiB (memory/max_memory_allocated)" in _page(lab, job)


def test_without_a_larger_logged_peak_the_gpu_metrics_stay_the_source(scratch, lab):
    job = _ended(lab, scratch)
    _log_peak(volume_dir("default/vision-scratch", f"jobs/checkpoints/job-{job.pk}"), values=(1 * GIB,))
    usage = _collect()
    assert usage.tensorboard_peak_mib == 1024
    history = UsageHistory.objects.get(owner=lab.alice, key="name:notebook-*")
    assert history.peak_memory_source == "simulated" and history.peak_memory_mib == usage.peak_memory_mib


def test_a_checkpoint_directory_without_event_files_says_so(scratch, lab):
    job = _ended(lab, scratch)
    usage = _collect()
    assert usage.tensorboard_peak_mib is None
    assert usage.tensorboard_note == "no event files (its checkpoint directory is empty)"
    assert "no event files" in _page(lab, job)


def test_a_job_without_a_checkpoint_directory_has_nothing_to_say(scratch, lab):
    job = _ended(lab, scratch)
    CheckpointDir.objects.filter(job=job).delete()
    usage = _collect()
    assert (usage.tensorboard_peak_mib, usage.tensorboard_note) == (None, "")
    assert UsageHistory.objects.get(owner=lab.alice, key="name:notebook-*").peak_memory_source == "simulated"


@pytest.fixture
def on_kubernetes(scratch, lab, kube_fake, sleeps, settings):  # noqa: F811 - fixtures
    """The default cluster on the Kubernetes backend (the fake API server): its sources live on claims the
    portal reads only where its workers mount them."""
    from scheduling.backends.factory import kubernetes_backend

    def use(mounts: str):
        settings.CHECKPOINT_READ_MOUNTS = dict(pair.split("=", 1) for pair in mounts.split(",") if pair)
        backend = kubernetes_backend("default", host=kube_fake.url, qps=0, timeout_s=2.0, connect_timeout_s=1.0,
                                     watch_timeout_s=2, sleep=sleeps)
        backends._cache["default"] = backend
        return backend

    old = backends._cache.pop("default", None)
    yield use
    backend = backends._cache.pop("default", None)
    if backend is not None:
        backend.close()
    if old is not None:
        backends._cache["default"] = old


def test_a_source_the_portal_does_not_mount_is_named_on_the_job_page(on_kubernetes, scratch, lab):
    on_kubernetes("")
    job = _ended(lab, scratch)
    # while it runs, the page says so already
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, finished_at=None, checkpoint={"source": "x"})
    collect_service.collect(src=SimulatedSource())
    assert "not read: the portal does not mount data source vision-scratch" in _page(lab, job)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    usage = _collect()
    assert usage.tensorboard_peak_mib is None
    assert usage.tensorboard_note == ("not read: the portal does not mount data source vision-scratch of cluster "
                                      "default (CHECKPOINT_READ_MOUNTS)")
    page = _page(lab, job)
    assert 'id="gpu-tensorboard"' in page and "does not mount data source vision-scratch" in page


def test_a_source_the_workers_mount_is_read_there(on_kubernetes, scratch, lab, tmp_path):
    mount = tmp_path / "mnt" / "vision-scratch"  # the claim's root, as the workers mount it
    on_kubernetes(f"default/vision-scratch={mount}")
    job = _ended(lab, scratch)
    _log_peak(mount / f"jobs/checkpoints/job-{job.pk}", tag="gpu/peak_memory_gib", values=(7.5,))
    usage = _collect()
    assert usage.tensorboard_peak_mib == 7.5 * 1024 and "gpu/peak_memory_gib" in usage.tensorboard_note


def test_a_mount_never_reads_outside_its_directory(on_kubernetes, tmp_path):
    backend = on_kubernetes(f"default/vision-scratch={tmp_path / 'mnt'}")
    assert backend.readable_dir(storage="default/vision-scratch", sub_path="../../etc") is None
    assert backend.readable_dir(storage="default/other", sub_path="jobs") is None
    assert backend.readable_dir(storage="default/vision-scratch", sub_path="jobs") == (tmp_path / "mnt" / "jobs")


@pytest.mark.parametrize(("source", "fraction", "metric", "logged", "expected"), [
    ("prometheus", False, 9000.0, 6000.0, (9000.0, "dcgm")),  # the GPU saw more (context, cache): kept
    ("prometheus", False, 9000.0, 12000.0, (12000.0, "tensorboard")),  # the samples missed the peak
    ("prometheus", False, None, 6000.0, (6000.0, "tensorboard")),  # no GPU metrics at all
    ("prometheus", True, 40000.0, 6000.0, (6000.0, "tensorboard")),  # a fraction's DCGM peak is its GPU's
    ("hami", True, 9000.0, 6000.0, (9000.0, "hami")),  # a fraction's own container: kept
    ("prometheus", False, 9000.0, None, (9000.0, "dcgm")),
    ("prometheus", False, None, None, (None, "")),
])
def test_which_peak_the_right_sizer_takes(source, fraction, metric, logged, expected):
    from observability.services.rightsizing import peak_of

    usage = AttemptUsage(source=source, peak_memory_mib=metric, tensorboard_peak_mib=logged)
    assert peak_of(usage, fraction=fraction) == expected


def test_the_demo_walkthrough(settings, tmp_path, client_for, go):
    """docs/fractions.md, "a peak from TensorBoard", on the demo's lab: alice's whole-GPU job on a100-shared with
    its checkpoint directory on vision-scratch logs 11 GiB, is stopped, and its page and hint say so."""
    from pathlib import Path

    from django.contrib.auth import get_user_model

    from lab import demo
    from scheduling.models import SimPod
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    settings.DATA_DIR = str(tmp_path)
    demo.seed(jobs=False)
    alice_user = get_user_model().objects.get(username="alice")
    alice = client_for(alice_user)
    r = go(alice.post, "/api/v1/jobs", {"name": "notebook-3", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                        "command": ["sleep", "3600"], "flavor": "a100-shared", "gpus": 1,
                                        "checkpoint": {"source": "vision-scratch"}}, format="json")
    assert r.status_code == 201, r.json()
    job = Job.objects.get(pk=r.json()["id"])
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.reason_message
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=10))
    collect_service.collect(src=SimulatedSource())
    assert AttemptUsage.objects.get(job=job).tensorboard_note == ("read from the checkpoint directory when the "
                                                                  "attempt ends")
    pod = SimPod.objects.get(job_id=job.pk)
    directory = Path({m["path"]: m for m in pod.mounts}["/checkpoint"]["dir"])
    assert directory == tmp_path / "volumes" / "default" / "vision-scratch" / "checkpoints" / f"job-{job.pk}"
    _log_peak(directory, values=(11 * GIB,))
    assert go(alice.post, f"/api/v1/jobs/{job.pk}/cancel", {}, format="json").status_code == 200
    assert collect_service.collect(src=SimulatedSource()).finalized == 1
    c = Client()
    c.force_login(alice_user)
    page = c.get(f"/jobs/{job.pk}/").content.decode()
    assert ("TensorBoard</strong> (peak memory from the checkpoint directory, attempt 1): peak 11.0 GiB "
            "(memory/max_memory_allocated) in 1 event file") in page
    hint = next(h for h in alice.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()["hints"]
                if h["code"] == "fits_fraction")
    assert (hint["data"]["source"], hint["data"]["gpu_memory_gib"]) == ("tensorboard", 14)
    rec = alice.get("/api/v1/recommendations", {"name": "notebook-4", "flavor": "a100-shared"}).json()
    assert (rec["fraction"]["source"], rec["fraction"]["gpu_memory_gib"]) == ("tensorboard", 14)
