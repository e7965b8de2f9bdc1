"""The fake API server's Secrets and the kubelet's answer to a pod whose Secret is not in its namespace, as a
real cluster gives them (official client, no portal code)."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client as k8s

from tests.fakes.test_k8s_fake import call, pod

NS = "team-a"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name="s", data=None, type_="Opaque"):
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": type_,
            "data": {k: b64(v) for k, v in (data or {"k": "v"}).items()}}


@pytest.fixture
def core(raw_api):
    return k8s.CoreV1Api(raw_api)


def test_secret_create_get_list_update_delete_with_resource_versions(kube_fake, core):
    status, created = call(core.create_namespaced_secret, NS, secret())
    assert status == 201 and created["metadata"]["resourceVersion"]
    assert call(core.create_namespaced_secret, NS, secret())[1]["reason"] == "AlreadyExists"
    assert call(core.read_namespaced_secret, "s", NS)[1]["data"] == {"k": b64("v")}
    assert [s["metadata"]["name"] for s in call(core.list_namespaced_secret, NS)[1]["items"]] == ["s"]
    assert call(core.list_namespaced_secret, "team-b")[1]["items"] == []
    body = secret(data={"k": "w"})
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, updated = call(core.replace_namespaced_secret, "s", NS, body)
    assert status == 200 and kube_fake.secret_text(NS, "s") == {"k": "w"}
    status, stale = call(core.replace_namespaced_secret, "s", NS, body)  # the version read before the update
    assert status == 409 and stale["reason"] == "Conflict"
    assert call(core.delete_namespaced_secret, "s", NS)[0] == 200
    assert call(core.read_namespaced_secret, "s", NS)[0] == 404
    assert call(core.delete_namespaced_secret, "s", NS)[0] == 404


@pytest.mark.parametrize(("body", "message"), [
    (secret(name="Bad_Name"), "RFC 1123"),
    ({**secret(), "data": {"bad key": b64("v")}}, "valid config key"),
    ({**secret(), "data": {"k": "%%%not-base64"}}, "base64"),
    (secret(type_="kubernetes.io/dockerconfigjson"), ".dockerconfigjson"),
])
def test_invalid_secrets_are_422(core, body, message):
    status, answer = call(core.create_namespaced_secret, NS, body)
    assert status == 422 and message in answer["message"]


def test_a_secret_type_is_immutable(core):
    _, created = call(core.create_namespaced_secret, NS, secret())
    body = secret(data={".dockerconfigjson": "{}"}, type_="kubernetes.io/dockerconfigjson")
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, answer = call(core.replace_namespaced_secret, "s", NS, body)
    assert status == 422 and "immutable" in answer["message"]


def test_string_data_is_merged_into_data(kube_fake, core):
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sd"}, "stringData": {"token": "t0"}}
    assert call(core.create_namespaced_secret, NS, body)[0] == 201
    assert kube_fake.secret_text(NS, "sd") == {"token": "t0"} and "stringData" not in kube_fake.secrets[(NS, "sd")]


def _with_secret_env(name="p", ref="creds", key="token"):
    p = pod(name, gates=())
    p["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {
        "name": ref, "key": key}}}]
    return p


def _with_secret_volume(name="p", ref="creds"):
    p = pod(name, gates=())
    p["spec"]["volumes"] = [{"name": "creds", "secret": {"secretName": ref, "defaultMode": 0o400}}]
    p["spec"]["containers"][0]["volumeMounts"] = [{"name": "creds", "mountPath": "/etc/creds", "readOnly": True}]
    return p


def test_pod_with_a_missing_secret_env_is_created_and_stays_pending_with_an_event(kube_fake, core):
    kube_fake.add_node("n1", gpus=4, labels={"gpu-type": "a100"})
    assert call(core.create_namespaced_pod, NS, _with_secret_env())[0] == 201  # admitted: not the API's check
    kube_fake.run(NS, "p")
    p = kube_fake.pod(NS, "p")
    assert p["status"]["phase"] == "Pending"
    waiting = p["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "CreateContainerConfigError", "message": 'secret "creds" not found'}
    [event] = kube_fake.pod_events(NS, "p")
    assert event["type"] == "Warning" and 'secret "creds" not found' in event["message"]
    assert [e["reason"] for e in call(core.list_namespaced_event, NS)[1]["items"]] == ["Failed"]
    # The kubelet retries: once the Secret exists (with the key), the container starts.
    kube_fake.add_secret(NS, "creds", {"other": "x"})
    kube_fake.run(NS, "p")
    assert "couldn't find key token" in kube_fake.pod(NS, "p")["status"]["containerStatuses"][0]["state"][
        "waiting"]["message"]
    kube_fake.secrets.clear()
    kube_fake.add_secret(NS, "creds", {"token": "x"})
    kube_fake.run(NS, "p")
    assert kube_fake.pod(NS, "p")["status"]["phase"] == "Running"


def test_a_secret_in_another_namespace_does_not_count(kube_fake, core):
    kube_fake.add_node("n1", gpus=4, labels={"gpu-type": "a100"})
    kube_fake.add_secret("team-b", "creds", {"token": "x"})
    call(core.create_namespaced_pod, NS, _with_secret_volume())
    kube_fake.run(NS, "p")
    p = kube_fake.pod(NS, "p")
    assert p["status"]["phase"] == "Pending"
    assert p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    assert kube_fake.pod_events(NS, "p")[0]["reason"] == "FailedMount"


def test_a_missing_image_pull_secret_is_only_a_warning(kube_fake, core):
    kube_fake.add_node("n1", gpus=4, labels={"gpu-type": "a100"})
    p = pod("p", gates=())
    p["spec"]["imagePullSecrets"] = [{"name": "registry"}]
    call(core.create_namespaced_pod, NS, p)
    kube_fake.run(NS, "p")
    assert kube_fake.pod(NS, "p")["status"]["phase"] == "Running"
    assert kube_fake.pod_events(NS, "p")[0]["reason"] == "FailedToRetrieveImagePullSecret"


@pytest.mark.parametrize("volume", [
    {"secret": {"secretName": "s"}}, {"configMap": {"name": "c"}}, {"emptyDir": {}},
    {"persistentVolumeClaim": {"claimName": "c"}}, {"projected": {"sources": []}}, {"downwardAPI": {"items": []}},
    {"csi": {"driver": "d"}}, {"ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
])
def test_restricted_profile_allows_its_volume_types(core, volume):
    p = pod("p")
    p["spec"]["volumes"] = [{"name": "v", **volume}]
    assert call(core.create_namespaced_pod, NS, p)[0] == 201


@pytest.mark.parametrize("volume", [{"nfs": {"server": "x", "path": "/"}}, {"gitRepo": {"repository": "x"}},
                                    {"hostPath": {"path": "/etc"}}])
def test_restricted_profile_refuses_other_volume_types(core, volume):
    p = pod("p")
    p["spec"]["volumes"] = [{"name": "v", **volume}]
    status, body = call(core.create_namespaced_pod, NS, p)
    assert status == 403 and "restricted volume types" in body["message"]
