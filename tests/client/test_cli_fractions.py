"""``gpup`` shows a fraction of a GPU (docs/fractions.md): ``get`` says the share and what was asked for, ``list``
adds the pods' shares up; a whole-GPU job reads as before; ``rightsize`` and ``quote`` say which fraction would do."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from gpuportal.cli import print_job
from gpuportal.cli_base import fraction_text, gpus_text

JOB = {"id": 9, "name": "nb", "state": "running", "owner": "alice", "department": "vision", "pods": 1, "gpus": 1,
       "flavor": "a100-shared", "tier": "realtime", "urgency": "normal", "image": "img", "command": ["sh"]}


def test_get_shows_the_fraction(capsys):
    print_job({**JOB, "fraction": {"gpu_memory_gib": 20.0, "gpu_cores": 30, "gpu_replicas": None, "share": 0.3}})
    assert "1 x 0.3 GPU (20 GiB, 30% compute) a100-shared" in capsys.readouterr().out
    print_job({**JOB, "fraction": None, "gpus": 2})
    assert "1 x 2 a100-shared" in capsys.readouterr().out


def test_list_and_replicas():
    two = {**JOB, "pods": 2, "fraction": {"gpu_memory_gib": None, "gpu_cores": None, "gpu_replicas": 1, "share": 0.25}}
    assert gpus_text(two) == "0.5" and fraction_text(two) == "0.25 GPU (1 replica)"
    assert gpus_text({**JOB, "gpus": 4, "pods": 2}) == "8"


def _measured_notebooks(lab, n=3):
    from observability.models import AttemptUsage
    from observability.services.rightsizing import learn
    from quotas.models import GpuSharing, Price
    from scheduling.models import Job

    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    Price.objects.update_or_create(flavor=lab.a100, tier="elastic", defaults={"per_gpu_hour": 4000})
    now = timezone.now()
    for _ in range(n):
        job = Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name="notebook-1",
                                 kind="session", image="jupyter:1", command=["x"], gpus_per_pod=1, state="succeeded",
                                 finished_at=now)
        usage = AttemptUsage.objects.create(job=job, attempt=1, source="prometheus", gpus=1, samples=30,
                                            started_at=now - timedelta(hours=1), ended_at=now, busy_gpus=0.05,
                                            peak_memory_mib=9 * 1024, mean_util=5, final=True)
        learn(usage, succeeded=True)


@pytest.mark.django_db
def test_rightsize_says_which_fraction_would_do(gpup, lab):
    _measured_notebooks(lab)
    result = gpup("rightsize", "notebook-2", "--flavor", "a100-80gb")
    assert result.exit_code == 0, result.output
    assert ("a fraction fits: notebook-* used 9 GB at most: 0.138 GPU (11 GiB) would cost 0.6 credits an hour "
            "instead of 4.0 (measured by dcgm; ask for gpu_memory_gib: 11)") in result.stdout
    body = json.loads(gpup("rightsize", "notebook-2", "--flavor", "a100-80gb", "--json").stdout)
    assert body["fraction"]["share"] == 0.138
    assert "no fraction of a100-mig-3g.40gb fits" in gpup("rightsize", "notebook-2", "--flavor",
                                                          "a100-mig-3g.40gb").stdout
    bad = gpup("rightsize", "notebook-2", "--flavor", "nope")
    assert bad.exit_code != 0 and "flavor" in bad.stderr
    empty = gpup("rightsize")
    assert empty.exit_code != 0 and "give a job name" in empty.stderr


@pytest.mark.django_db
def test_quote_says_which_fraction_would_do(gpup, lab, tmp_path):
    _measured_notebooks(lab)
    spec = tmp_path / "nb.yaml"
    spec.write_text("name: notebook-4\nimage: jupyter:1\ncommand: [x]\nflavor: a100-80gb\ngpus: 1\n"
                    "max_runtime_s: 3600\n")
    result = gpup("quote", "-f", spec)
    assert result.exit_code == 0, result.output
    assert "right-sizing: your last 3 runs of notebook-* used" in result.stdout
    assert "a fraction fits: notebook-* used 9 GB at most: 0.138 GPU (11 GiB)" in result.stdout


@pytest.mark.django_db(transaction=True)
def test_a_session_file_without_a_size_gets_the_labs_default_fraction(gpup, lab, settings, tmp_path):
    from quotas.models import GpuSharing
    from scheduling.models import Job, SessionImage

    settings.SESSION_DEFAULT_GPU_FRACTION = 0.25
    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    SessionImage.objects.create(name="jupyterlab", label="JupyterLab", image="quay.io/jupyter/base-notebook:2026",
                                port=8888, readiness_path="/api/status", command=["start-notebook.py"])
    path = tmp_path / "nb.yaml"
    path.write_text("name: nb-1\nkind: session\nsession_image: jupyterlab\nflavor: a100-80gb\nmax_runtime_s: 14400\n")
    result = gpup("submit", "-f", path)
    assert result.exit_code == 0, result.output
    job = Job.objects.get(name="nb-1")
    assert (job.gpus_per_pod, job.gpu_memory_mib, job.share_milli) == (1, 20 * 1024, 250)
