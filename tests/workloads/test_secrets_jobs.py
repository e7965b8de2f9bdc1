"""A job that uses department secrets, end to end: submitted through the API, admitted by the cycle, and
started on Kubernetes (the fake API server) or the simulated cluster. The portal writes its own Secrets in
the department's namespace before the pods, the pods name Secrets and keys, and no value is shown anywhere
the portal shows a job."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from scheduling.models import Job, JobEvent, JobState, SimPod
from scheduling.services.cycle import run_cycle
from workloads.services import secrets

pytestmark = pytest.mark.django_db

TOKEN = "0123456789abcdef0123456789abcdef01234567"
PASSWORD = "registry-password-that-is-long-enough"
USES = [{"secret": "wandb", "key": "api_key", "env": "WANDB_API_KEY"}, {"secret": "hf", "path": "/etc/secrets/hf"}]


@pytest.fixture
def declared(lab):
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="wandb", kind="value",
                          values={"api_key": TOKEN})
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="hf", kind="reference",
                          reference_name="hf-token", keys=["token"])
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="registry", kind="value",
                          purpose="image-pull", registry="registry.lab.example:5000", username="ci",
                          values={"password": PASSWORD})
    secrets.secret_create(actor=lab.nadmin, department=lab.nlp, name="nlp-pull", kind="reference",
                          purpose="image-pull", reference_name="nlp-registry")


def test_on_kubernetes_the_secrets_are_written_before_the_pod_that_names_them(kube, lab, client_for, payload,
                                                                              declared, go):
    kube.add_secret("gpu-vision", "hf-token", {"token": "hf_x"})
    r = go(client_for(lab.alice).post, "/api/v1/jobs", payload(secrets=USES), format="json")
    assert r.status_code == 201, r.json()
    job = Job.objects.get(pk=r.json()["id"])
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED, job.reason_message
    assert kube.secret_text("gpu-vision", "portal-secret-wandb") == {"api_key": TOKEN}
    config = json.loads(kube.secret_text("gpu-vision", "portal-secret-registry")[".dockerconfigjson"])
    assert config["auths"]["registry.lab.example:5000"]["password"] == PASSWORD
    pod = kube.pod("gpu-vision", f"job-{job.pk}-a1")
    spec = pod["spec"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "portal-secret-wandb",
                                                                     "key": "api_key"}}} in spec["containers"][0]["env"]
    assert [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v] == ["hf-token"]  # beside /dev/shm
    assert spec["imagePullSecrets"] == [{"name": "portal-secret-registry"}]  # not the other department's
    assert TOKEN not in json.dumps(pod) and PASSWORD not in json.dumps(pod)
    kube.run("gpu-vision", f"job-{job.pk}-a1")
    assert kube.pod("gpu-vision", f"job-{job.pk}-a1")["status"]["phase"] == "Running"
    # Nothing the portal shows of the job holds a value: its API, its page, its timeline.
    page = Client()
    page.force_login(lab.alice)
    html = page.get(f"/jobs/{job.pk}/")
    assert html.status_code == 200 and "WANDB_API_KEY" in html.content.decode()
    shown = [client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}").content.decode(), html.content.decode(),
             json.dumps(list(JobEvent.objects.filter(job=job).values("message", "data")), default=str)]
    for text in shown:
        assert TOKEN not in text and PASSWORD not in text


def test_a_reference_missing_from_the_namespace_fails_the_job_with_the_kubelets_reason(kube, lab, client_for,
                                                                                       payload, declared, go):
    from scheduling.services.inventory import sync_cluster

    uses = [{"secret": "hf", "key": "token", "env": "HF_TOKEN"}]
    r = go(client_for(lab.alice).post, "/api/v1/jobs", payload(secrets=uses), format="json")
    job = Job.objects.get(pk=r.json()["id"])
    go(run_cycle)
    kube.run("gpu-vision", f"job-{job.pk}-a1")  # the kubelet cannot start it: no Secret "hf-token"
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert 'secret "hf-token" not found' in job.reason_message


def test_on_the_simulated_cluster_the_log_records_names_and_paths_only(lab, client_for, payload, declared, go):
    r = go(client_for(lab.alice).post, "/api/v1/jobs", payload(secrets=USES), format="json")
    assert r.status_code == 201
    pod = SimPod.objects.get(job_id=r.json()["id"])
    assert "env WANDB_API_KEY <- portal-secret-wandb/api_key" in pod.log
    assert "files /etc/secrets/hf <- hf-token" in pod.log and "image pull secret portal-secret-registry" in pod.log
    assert TOKEN not in pod.log and PASSWORD not in pod.log


def test_a_rotated_value_reaches_the_next_start(kube, lab, client_for, payload, declared, go):
    secret = secrets.DepartmentSecret.objects.get(name="wandb")
    secrets.secret_update(actor=lab.vadmin, secret=secret, values={"api_key": "rotated"})
    go(client_for(lab.alice).post, "/api/v1/jobs", payload(secrets=USES[:1]), format="json")
    go(run_cycle)
    assert kube.secret_text("gpu-vision", "portal-secret-wandb") == {"api_key": "rotated"}


def test_deleting_a_value_secret_deletes_the_portals_copy_and_nothing_else(kube, lab, client_for, payload,
                                                                            declared, go):
    kube.add_secret("gpu-vision", "hf-token", {"token": "hf_x"})
    go(client_for(lab.alice).post, "/api/v1/jobs", payload(secrets=USES), format="json")
    go(run_cycle)
    assert ("gpu-vision", "portal-secret-wandb") in kube.secrets
    kube.add_secret("gpu-nlp", "portal-secret-wandb", {"api_key": "someone else's"})  # not the portal's
    for name in ("wandb", "hf"):
        r = go(client_for(lab.vadmin).delete, f"/api/v1/secrets/{name}")
        assert r.status_code == 204
    assert ("gpu-vision", "portal-secret-wandb") not in kube.secrets
    assert ("gpu-vision", "hf-token") in kube.secrets  # a reference's Secret is the department's own
    assert kube.secret_text("gpu-nlp", "portal-secret-wandb") == {"api_key": "someone else's"}


def test_a_secret_declared_again_before_the_delete_ran_is_kept(kube, lab, declared, go):
    from scheduling.tasks import delete_department_secret

    kube.add_secret("gpu-vision", "portal-secret-wandb", {"api_key": "x"})
    kube.secrets[("gpu-vision", "portal-secret-wandb")]["metadata"]["labels"] = {
        "app.kubernetes.io/managed-by": "gpu-portal"}
    assert delete_department_secret("vision", "wandb", "portal-secret-wandb") == []  # "wandb" exists again
    assert ("gpu-vision", "portal-secret-wandb") in kube.secrets


def test_no_notification_or_log_line_holds_a_value(lab, client_for, payload, declared, go, caplog, mailoutbox):
    """A job that uses the secrets runs, is retried and fails, and its department admin rotates a value: the
    outbox's events (what webhooks post), the e-mails and every log record of all that name no value."""
    import logging
    from datetime import timedelta

    from django.utils import timezone

    from notifications.models import Event
    from scheduling.backends import get_backend
    from scheduling.services.inventory import sync_cluster

    caplog.set_level(logging.DEBUG)
    body = payload(secrets=USES, max_retries=1, retry_on_exit_codes=[3])
    job = Job.objects.get(pk=go(client_for(lab.alice).post, "/api/v1/jobs", body, format="json").json()["id"])
    for exit_code in (3, 1):  # retried, then failed for good
        go(run_cycle)
        go(sync_cluster)
        job.refresh_from_db()
        assert get_backend("default").fail_pod(job_id=job.pk, attempt=job.attempt, index=0, exit_code=exit_code)
        go(sync_cluster)
        Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    job.refresh_from_db()
    assert (job.state, job.retries) == (JobState.FAILED, 1)
    rotated = "rotated-" + TOKEN
    r = go(client_for(lab.vadmin).patch, "/api/v1/secrets/wandb", {"values": {"api_key": rotated}}, format="json")
    assert r.status_code == 200
    kinds = set(Event.objects.values_list("kind", flat=True))
    assert {"job.retried", "job.failed"} <= kinds and mailoutbox
    shown = [json.dumps(list(Event.objects.values("kind", "data")), default=str), caplog.text,
             *(f"{m.subject}\n{m.body}\n{getattr(m, 'alternatives', '')}" for m in mailoutbox)]
    for text in shown:
        for value in (TOKEN, rotated, PASSWORD):
            assert value not in text
