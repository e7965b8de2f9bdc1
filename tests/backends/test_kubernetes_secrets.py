"""Department secrets on Kubernetes: the pod spec names Secrets and keys only (env ``secretKeyRef``, read-only
secret volumes, image pull secrets) and stays within the restricted profile; the Secrets the portal owns are
written before the pods, idempotently, and never over a Secret it does not own."""

from __future__ import annotations

import json
import logging

import pytest

from scheduling.backends.base import InvalidPodSpec
from scheduling.backends.kube.podspec import pod_manifest
from scheduling.backends.kube.secrets import ANNOTATION_VERSION
from workloads.podsecrets import DOCKER_CONFIG_TYPE, OwnedSecret, PodSecrets, SecretEnv, SecretFiles

NS = "team-a"
TOKEN = "0123456789abcdef0123456789abcdef01234567"
SECRETS = PodSecrets(
    env=(SecretEnv(name="WANDB_API_KEY", secret="portal-secret-wandb", key="api_key"),),
    files=(SecretFiles(secret="hf-token", path="/etc/secrets/hf"),),
    image_pull=("portal-secret-registry",),
    owned=(OwnedSecret(name="portal-secret-wandb", data=(("api_key", TOKEN),)),
           OwnedSecret(name="portal-secret-registry", type=DOCKER_CONFIG_TYPE,
                       data=((".dockerconfigjson", '{"auths": {}}'),))),
)


@pytest.fixture
def gpu_node(kube_fake):
    kube_fake.add_node("gpu-0", gpus=8, labels={"gpu-type": "a100"})


def test_the_pod_spec_names_secrets_and_never_holds_a_value(make_podset):
    manifest = pod_manifest(make_podset(secrets=SECRETS), 0)
    container, spec = manifest["spec"]["containers"][0], manifest["spec"]
    assert {"name": "EPOCHS", "value": "3"} in container["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "portal-secret-wandb",
                                                                     "key": "api_key"}}} in container["env"]
    assert spec["volumes"] == [{"name": "secret-0", "secret": {"secretName": "hf-token", "defaultMode": 0o400}}]
    assert container["volumeMounts"] == [{"name": "secret-0", "mountPath": "/etc/secrets/hf", "readOnly": True}]
    assert spec["imagePullSecrets"] == [{"name": "portal-secret-registry"}]
    assert TOKEN not in json.dumps(manifest)
    assert TOKEN not in repr(make_podset(secrets=SECRETS))  # a logged PodSet shows no value either


def test_a_pod_without_secrets_has_no_volumes_or_pull_secrets(make_podset):
    spec = pod_manifest(make_podset(), 0)["spec"]
    assert "volumes" not in spec and "imagePullSecrets" not in spec


def test_owned_secrets_are_written_before_the_pod_which_the_restricted_namespace_admits(
        kube_backend, kube_fake, make_podset, gpu_node, caplog):
    kube_fake.add_secret(NS, "hf-token", {"token": "hf"})
    caplog.set_level(logging.DEBUG)
    kube_backend.start(make_podset(secrets=SECRETS), ("gpu-0",))
    posts = [r.path.rsplit("/", 1)[-1] for r in kube_fake.requests if r.method == "POST"]
    assert posts == ["secrets", "secrets", "pods"]
    assert kube_fake.secret_text(NS, "portal-secret-wandb") == {"api_key": TOKEN}
    owned = kube_fake.secrets[(NS, "portal-secret-registry")]
    assert owned["type"] == DOCKER_CONFIG_TYPE and owned["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    kube_fake.run(NS, "job-42-a1")
    assert kube_fake.pod(NS, "job-42-a1")["status"]["phase"] == "Running"
    assert TOKEN not in caplog.text


def test_writing_again_is_idempotent_and_a_rotation_replaces_the_data(kube_backend, kube_fake, make_podset,
                                                                     gpu_node):
    kube_backend.ensure_pods(make_podset(secrets=SECRETS))
    version = kube_fake.secrets[(NS, "portal-secret-wandb")]["metadata"]["resourceVersion"]
    kube_backend.ensure_pods(make_podset(secrets=SECRETS))  # a retried task: nothing changes
    assert kube_fake.secrets[(NS, "portal-secret-wandb")]["metadata"]["resourceVersion"] == version
    assert not [r for r in kube_fake.requests if r.method == "PUT"]
    rotated = PodSecrets(env=SECRETS.env, owned=(OwnedSecret(name="portal-secret-wandb", data=(("api_key", "new"),),
                                                             version=2),))
    kube_backend.ensure_pods(make_podset(secrets=rotated, attempt=2))
    assert kube_fake.secret_text(NS, "portal-secret-wandb") == {"api_key": "new"}
    assert kube_fake.secrets[(NS, "portal-secret-wandb")]["metadata"]["annotations"][ANNOTATION_VERSION] == "2"
    [put] = [r for r in kube_fake.requests if r.method == "PUT"]
    assert put.body["metadata"]["resourceVersion"] == version  # optimistic concurrency on the update


def test_a_concurrent_writer_makes_the_update_read_again(kube_backend, kube_fake, make_podset, gpu_node):
    kube_fake.add_secret(NS, "portal-secret-wandb", {"api_key": "old"})
    kube_fake.secrets[(NS, "portal-secret-wandb")]["metadata"]["labels"] = {
        "app.kubernetes.io/managed-by": "gpu-portal"}

    def bump(fake):
        fake.secrets[(NS, "portal-secret-wandb")]["metadata"]["resourceVersion"] = str(fake._next_rv())

    kube_fake.race_next(bump, method="PUT")
    kube_backend.ensure_pods(make_podset(secrets=PodSecrets(owned=SECRETS.owned[:1])))
    assert kube_fake.secret_text(NS, "portal-secret-wandb") == {"api_key": TOKEN}
    assert len([r for r in kube_fake.requests if r.method == "PUT"]) == 2


def test_a_secret_the_portal_does_not_own_is_never_overwritten(kube_backend, kube_fake, make_podset, gpu_node):
    kube_fake.add_secret(NS, "portal-secret-wandb", {"api_key": "theirs"})
    with pytest.raises(InvalidPodSpec, match="not this portal's"):
        kube_backend.start(make_podset(secrets=SECRETS), ("gpu-0",))
    assert kube_fake.secret_text(NS, "portal-secret-wandb") == {"api_key": "theirs"}
    assert kube_fake.pod(NS, "job-42-a1") is None


def test_a_changed_type_recreates_the_owned_secret(kube_backend, kube_fake, make_podset, gpu_node):
    kube_backend.ensure_pods(make_podset(secrets=PodSecrets(owned=(OwnedSecret(name="portal-secret-x"),))))
    pull = OwnedSecret(name="portal-secret-x", type=DOCKER_CONFIG_TYPE, data=((".dockerconfigjson", "{}"),))
    kube_backend.ensure_pods(make_podset(secrets=PodSecrets(owned=(pull,)), attempt=2))
    assert kube_fake.secrets[(NS, "portal-secret-x")]["type"] == DOCKER_CONFIG_TYPE


def test_a_referenced_secret_missing_from_the_namespace_leaves_the_pod_pending(kube_backend, kube_fake,
                                                                               make_podset, gpu_node):
    from scheduling.backends.kube.status import pod_state

    kube_backend.start(make_podset(secrets=PodSecrets(env=(SecretEnv("T", "absent", "k"),))), ("gpu-0",))
    kube_fake.run(NS, "job-42-a1")
    state = pod_state(kube_fake.pod(NS, "job-42-a1"))
    assert state.phase == "Pending" and state.reason == "CreateContainerConfigError"
    assert 'secret "absent" not found' in state.message


def test_a_departments_secret_is_written_once_for_all_of_its_jobs(kube_backend, kube_fake, make_podset, gpu_node):
    for job_id in (1, 2, 3):
        kube_backend.start(make_podset(job_id=job_id, gpus_per_pod=1, secrets=SECRETS), ("gpu-0",))
    secret_calls = [(r.method, r.path.rsplit("/", 1)[-1]) for r in kube_fake.requests if "/secrets" in r.path]
    assert secret_calls == [("POST", "secrets"), ("POST", "secrets")]  # no POST answered 409 per start
    rotated = PodSecrets(env=SECRETS.env, owned=(OwnedSecret(name="portal-secret-wandb", data=(("api_key", "new"),),
                                                             version=2),))
    kube_backend.start(make_podset(job_id=4, gpus_per_pod=1, secrets=rotated), ("gpu-0",))  # a changed value: at once
    assert kube_fake.secret_text(NS, "portal-secret-wandb") == {"api_key": "new"}


def test_a_secret_deleted_behind_the_portals_back_is_written_again_after_a_while(kube_fake, make_podset, gpu_node,
                                                                                  kube_backend):
    kube_backend.start(make_podset(job_id=1, gpus_per_pod=1, secrets=SECRETS), ("gpu-0",))
    del kube_fake.secrets[(NS, "portal-secret-wandb")]
    now = [0.0]
    kube_backend.secrets_seen.clock = lambda: now[0]
    kube_backend.secrets_seen._seen = {k: (d, 0.0) for k, (d, _) in kube_backend.secrets_seen._seen.items()}
    now[0] = kube_backend.secrets_seen.recheck_s + 1
    kube_backend.start(make_podset(job_id=2, gpus_per_pod=1, secrets=SECRETS), ("gpu-0",))
    assert kube_fake.secret_text(NS, "portal-secret-wandb") == {"api_key": TOKEN}


def test_another_installations_secret_of_that_name_is_never_overwritten(kube_backend, kube_fake, make_podset,
                                                                         gpu_node):
    kube_fake.add_secret(NS, "portal-secret-wandb", {"api_key": "theirs"})
    kube_fake.secrets[(NS, "portal-secret-wandb")]["metadata"]["labels"] = {
        "app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/installation": "another-portal"}
    with pytest.raises(InvalidPodSpec, match="not this portal's"):
        kube_backend.start(make_podset(secrets=SECRETS), ("gpu-0",))
    assert kube_fake.secret_text(NS, "portal-secret-wandb") == {"api_key": "theirs"}
