"""gpup and sweeps: a 64-task array with a throttle of 8, an evaluation that waits for the whole array, hold and
release, the array shown and cancelled; the Python client's calls behind them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuportal.cli import cli
from scheduling.models import Job, JobArray, JobState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gpup(live_server, lab, token_for, tmp_path):
    runner = CliRunner()
    job_file = tmp_path / "sweep.yaml"
    job_file.write_text("name: sweep\nimage: nvcr.io/nvidia/pytorch:24.05-py3\nflavor: a100-80gb\ngpus: 1\n"
                        "command: [python, train.py, --lr-index, '{{index}}']\n")

    def run(*args, user=None):
        env = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": token_for(user or lab.alice),
               "GPU_PORTAL_CONFIG": str(tmp_path / "config.toml")}
        return runner.invoke(cli, [str(a).replace("JOB", str(job_file)) for a in args], env=env,
                             catch_exceptions=False)

    return run


def test_a_sweep_then_an_evaluation_that_waits_for_it(gpup, lab):
    r = gpup("submit", "-f", "JOB", "--array", "0-63%8", "--json")
    assert r.exit_code == 0, r.output
    array = json.loads(r.stdout)
    assert (array["size"], array["throttle"], array["counts"]["queued"]) == (64, 8, 64)
    assert Job.objects.get(array_id=array["id"], array_index=5).command[-1] == "5"
    r = gpup("submit", "-f", "JOB", "--set", "name=eval", "--dependency", f"afterok:a{array['id']}")
    assert r.exit_code == 0, r.output
    evaluation = Job.objects.get(name="eval")
    assert list(evaluation.dependencies.values_list("condition", "on_array_id")) == [("afterok", array["id"])]
    r = gpup("array", "show", f"a{array['id']}")
    assert r.exit_code == 0 and "64 tasks (0-63%8, at most 8 at once)" in r.stdout and "64 queued" in r.stdout
    assert gpup("array", "tasks", str(array["id"])).exit_code == 0

    assert gpup("hold", str(evaluation.pk)).exit_code == 0
    evaluation.refresh_from_db()
    assert evaluation.held_at is not None
    assert "(held)" not in gpup("release", str(evaluation.pk)).stdout
    assert gpup("hold", f"a{array['id']}").exit_code == 0
    assert Job.objects.filter(array_id=array["id"], held_at__isnull=False).count() == 64

    r = gpup("array", "cancel", f"a{array['id']}", "--waiting")
    assert r.exit_code == 0 and "64 cancelled" in r.stdout
    assert gpup("depend", str(evaluation.pk), "").exit_code == 0
    assert not evaluation.dependencies.exists()


def test_bad_sweep_input_is_a_usage_or_validation_error(gpup, lab):
    r = gpup("submit", "-f", "JOB", "--array", "0-63%0")
    assert r.exit_code != 0 and "throttle" in r.stderr and not JobArray.objects.exists()
    r = gpup("submit", "-f", "JOB", "--dependency", "afterwhile:3")
    assert r.exit_code != 0 and "afterok" in r.stderr
    assert gpup("hold", "x12").exit_code == 2
    assert not Job.objects.filter(state=JobState.QUEUED).exists()


def test_the_client_submits_and_reads_an_array(portal, lab, job_spec):
    client = portal(lab.alice)
    array = client.submit_array(job_spec(name="grid"), array="0-3")
    assert client.array(f"a{array['id']}")["counts"]["queued"] == 4
    assert [t["array_index"] for t in client.array_tasks(array)] == [0, 1, 2, 3]
    job = client.submit(job_spec(name="after"), after=f"afterany:a{array['id']}")
    assert job["after"] == [{"condition": "afterany", "array": array["id"]}]
    assert client.hold(job)["held"] is True and client.release(job["id"])["held"] is False
    assert client.array_cancel(array)["counts"]["cancelled"] == 4
