"""gpup and sessions: a job file of kind session, `gpup open` printing the one-time URL (its owner only), and
the client's connect()."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import gpuportal
from gpuportal.cli import cli

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gpup(live_server, lab, token_for, tmp_path):
    runner = CliRunner()

    def run(*args, user=None, input=None):
        env = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": token_for(user or lab.alice),
               "GPU_PORTAL_CONFIG": str(tmp_path / "config.toml")}
        return runner.invoke(cli, list(map(str, args)), env=env, input=input, catch_exceptions=False)

    return run


def test_a_session_from_a_job_file_opens_for_its_owner_only(gpup, lab, tmp_path, portal):
    from scheduling.models import Job, SessionImage
    from scheduling.services.clusters import sync_cluster
    from scheduling.services.cycle import run_cycle

    SessionImage.objects.create(name="jupyterlab", image="quay.io/jupyter/base-notebook:2026", port=8888)
    spec = tmp_path / "nb.yaml"
    spec.write_text("name: nb\nkind: session\nsession_image: jupyterlab\nflavor: a100-80gb\ngpus: 1\n")
    r = gpup("submit", "-f", spec, "--json")
    assert r.exit_code == 0, r.output
    job = Job.objects.get(name="nb")
    assert (job.kind, job.port, job.tier) == ("session", 8888, "realtime")
    run_cycle()
    sync_cluster()
    opened = gpup("open", job.pk, "--print-url")
    assert opened.exit_code == 0, opened.output
    assert opened.stdout.strip().startswith(f"http://127.0.0.1:8001/s/{job.pk}/_portal/connect?code=")
    refused = gpup("open", job.pk, "--print-url", user=lab.amy)
    assert refused.exit_code != 0 and "No such session" in refused.output
    with pytest.raises(gpuportal.errors.NotFound):
        portal(lab.bob).connect(job.pk)
    assert portal().connect(job.pk)["route"] == f"http://127.0.0.1:8001/s/{job.pk}/"
