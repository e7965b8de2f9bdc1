"""gpup and sessions: a job file of kind session, `gpup open` printing the one-time URL (its owner only), and
the client's connect(); `gpup service-key` and service_key(), the one credential a service's route takes."""

from __future__ import annotations

import json

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
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster
    from scheduling.services.sessions import route_url

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
    # the session's own origin (s<id>.<SESSION_DOMAIN>), never a path of the portal's host
    assert opened.stdout.strip().startswith(f"{route_url(job.pk)}_portal/connect?code=")
    refused = gpup("open", job.pk, "--print-url", user=lab.amy)
    assert refused.exit_code != 0 and "No such session" in refused.output
    with pytest.raises(gpuportal.errors.NotFound):
        portal(lab.bob).connect(job.pk)
    assert portal().connect(job.pk)["route"] == route_url(job.pk) == f"http://s{job.pk}.sessions.localhost:8001/s/{job.pk}/"


def _running_service(portal, lab):
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    job = portal().submit(name="llm", kind="service", image="ghcr.io/lab/serve:1", port=8000,
                          flavor="a100-80gb", gpus=1)
    run_cycle()
    sync_cluster()
    return job["id"]


def _route_auth(job_id, bearer):
    from django.test import Client as DjangoClient

    return DjangoClient().get(f"/sessions/{job_id}/auth", HTTP_AUTHORIZATION=f"Bearer {bearer}").status_code


def test_gpup_service_key_gives_the_credential_a_services_route_takes_and_the_api_token_is_not(gpup, lab, portal,
                                                                                               token_for):
    job_id = _running_service(portal, lab)
    r = gpup("service-key", job_id, user=lab.amy)  # any member of the service's department
    assert r.exit_code == 0, r.output
    key = r.stdout.strip()
    assert key.startswith("gps_") and "\n" not in key  # the key alone on stdout, for $(gpup service-key 42)
    assert f"/s/{job_id}/" in r.stderr and "Authorization: Bearer" in r.stderr
    assert _route_auth(job_id, key) == 200
    assert _route_auth(job_id, token_for(lab.amy)) == 404  # what gpup holds is no credential at a route
    as_json = gpup("service-key", job_id, "--json")
    assert as_json.exit_code == 0 and set(json.loads(as_json.stdout)) == {"key", "expires_at", "route"}
    assert portal().service_key(job_id)["key"].startswith("gps_")


def test_gpup_service_key_refuses_other_departments_and_sessions(gpup, lab, portal, tmp_path):
    from scheduling.models import SessionImage

    job_id = _running_service(portal, lab)
    refused = gpup("service-key", job_id, user=lab.bob)
    assert refused.exit_code == 3 and "No such service" in refused.output
    SessionImage.objects.create(name="jupyterlab", image="quay.io/jupyter/base-notebook:2026", port=8888)
    nb = portal().submit(name="nb", kind="session", session_image="jupyterlab", flavor="a100-80gb", gpus=1)
    conflict = gpup("service-key", nb["id"])
    assert conflict.exit_code == 6 and "open a session with Connect" in conflict.output
