"""The walk-through job of docs/workloads.md, every step as a researcher takes it: 2 nodes x 4 GPUs with
torchrun, a read-only dataset and a checkpoint directory, the W&B key from a department secret, preempted and
resumed from the same checkpoint directory by its next attempt, resubmitted from the department template. On
the simulated backend through the API, at the manifest level on the fake Kubernetes API server, and in the demo
lab (``manage.py demo``)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

import engine
from scheduling.models import Job, JobState, SimPod
from scheduling.services.cycle import apply_result, run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db

TOKEN = "0123456789abcdef0123456789abcdef01234567"  # a W&B key's shape; the test checks it never shows
TORCHRUN = ("torchrun --nnodes=$WORLD_SIZE --nproc-per-node=$PORTAL_NPROC_PER_NODE --node-rank=$NODE_RANK "
            "--master-addr=$MASTER_ADDR --master-port=$MASTER_PORT train.py --data /data/imagenet "
            "--checkpoint-dir $PORTAL_CHECKPOINT_DIR --resume")
SPEC = {
    "name": "ddp-resnet", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "flavor": "a100-80gb",
    "pods": 2, "gpus": 4, "cpu": "16", "memory": "128Gi", "tier": "elastic",
    "max_runtime_s": 57600, "max_retries": 2, "retry_on_exit_codes": [3],
    "mounts": [{"source": "imagenet", "path": "/data"}], "checkpoint": {"source": "vision-scratch"},
    "shm_mb": 16384, "env": {"WANDB_PROJECT": "ddp-resnet"},
    "secrets": [{"secret": "wandb", "key": "api_key", "env": "WANDB_API_KEY"}],
    "command": ["sh", "-c", TORCHRUN],
}


@pytest.fixture
def declared(lab, client_for, settings, tmp_path):
    """What the admins declared once, through the API: the platform's dataset, the department's scratch
    source, its W&B secret and its template."""
    settings.DATA_DIR = tmp_path
    root, vadmin = client_for(lab.root), client_for(lab.vadmin)
    for who, body in ((root, {"name": "imagenet", "cluster": "default", "kind": "dataset", "shared_with_all": True,
                              "claim_name": "imagenet"}),
                      (vadmin, {"name": "vision-scratch", "cluster": "default", "department": "vision",
                                "claim_name": "vision-scratch", "writable": True})):
        r = who.post("/api/v1/data-sources", body, format="json")
        assert r.status_code == 201, r.json()
    r = vadmin.post("/api/v1/secrets", {"name": "wandb", "kind": "value", "values": {"api_key": TOKEN}},
                    format="json")
    assert r.status_code == 201, r.json()
    r = vadmin.post("/api/v1/templates", {"name": "ddp-resnet", "scope": "department", "spec": SPEC},
                    format="json")
    assert r.status_code == 201, r.json()
    return r.json()["id"]


def _submit(client, go, **body):
    r = go(client.post, "/api/v1/jobs", {"template": "ddp-resnet", **body}, format="json")
    assert r.status_code == 201, r.json()
    assert "warnings" not in r.json() or not r.json()["warnings"]  # the key is a secret, not plain env
    return Job.objects.get(pk=r.json()["id"])


def _preempt(go, job, by):
    """As the engine would: ``by`` preempts ``job`` (tests/workloads/test_attempts_and_retention.py)."""
    _, ctx = build_snapshot(now=timezone.now())
    go(apply_result, result=engine.CycleResult(preemptions=(engine.Preemption(
        preemptor_id=by.pk, victim_ids=(job.pk,), reason="priority", message="realtime job"),)), ctx=ctx)


def test_the_walkthrough_job_on_the_simulated_cluster(lab, declared, client_for, go, submit, tmp_path):
    alice = client_for(lab.alice)
    job = _submit(alice, go)
    detail = alice.get(f"/api/v1/jobs/{job.pk}").json()
    assert (detail["pods"], detail["gpus"]) == (2, 4)
    assert detail["checkpoint"]["path"] == "/checkpoint" and detail["checkpoint"]["source"] == "vision-scratch"
    assert TOKEN not in json.dumps(detail)

    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.reason_message
    pods = list(SimPod.objects.filter(job_id=job.pk, attempt=1).order_by("index"))
    assert [p.name for p in pods] == [f"job-{job.pk}-a1-0", f"job-{job.pk}-a1-1"]
    assert len({p.node for p in pods}) == 2  # one node each: 4 GPUs a node
    for i, pod in enumerate(pods):
        assert {k: pod.env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK",
                                        "PORTAL_NPROC_PER_NODE", "PORTAL_CHECKPOINT_DIR", "PORTAL_ATTEMPT",
                                        "WANDB_PROJECT")} == {
            "MASTER_ADDR": f"job-{job.pk}-a1-0.job-{job.pk}-a1", "MASTER_PORT": "29500", "WORLD_SIZE": "2",
            "NODE_RANK": str(i), "RANK": str(i), "PORTAL_NPROC_PER_NODE": "4", "PORTAL_CHECKPOINT_DIR": "/checkpoint",
            "PORTAL_ATTEMPT": "1", "WANDB_PROJECT": "ddp-resnet"}
        assert "WANDB_API_KEY" not in pod.env and TOKEN not in json.dumps(pod.env)  # a secret, named in the log
        assert "env WANDB_API_KEY <- portal-secret-wandb/api_key" in pod.log and TOKEN not in pod.log
        mounts = {m["path"]: m for m in pod.mounts}
        assert mounts["/data"]["read_only"] and mounts["/data"]["source"] == "imagenet"
        assert not mounts["/checkpoint"]["read_only"] and mounts["/checkpoint"]["checkpoint"]
        assert mounts["/dev/shm"]["size_mb"] == 16384
    checkpoint = Path({m["path"]: m for m in pods[0].mounts}["/checkpoint"]["dir"])
    assert checkpoint.is_relative_to(tmp_path) and checkpoint.parts[-2:] == ("checkpoints", f"job-{job.pk}")
    (checkpoint / "epoch-3.pt").write_text("weights after epoch 3")  # rank 0 saves

    # preempted by a realtime job, it is requeued as attempt 2 (a preemption, not a retry)
    rt = go(submit, lab.amy, gpus=4, tier="realtime", name="eval-server")
    _preempt(go, job, rt)
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.attempt, job.preemption_count, job.retries) == (JobState.QUEUED, 2, 1, 0)
    go(client_for(lab.amy).post, f"/api/v1/jobs/{rt.pk}/cancel")  # the GPUs free again
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.RUNNING, 2), job.reason_message
    for i, pod in enumerate(SimPod.objects.filter(job_id=job.pk, attempt=2).order_by("index")):
        assert pod.name == f"job-{job.pk}-a2-{i}"
        assert pod.env["MASTER_ADDR"] == f"job-{job.pk}-a2-0.job-{job.pk}-a2" and pod.env["PORTAL_ATTEMPT"] == "2"
        again = Path({m["path"]: m for m in pod.mounts}["/checkpoint"]["dir"])
        assert again == checkpoint and (again / "epoch-3.pt").read_text() == "weights after epoch 3"

    # resubmitted from the template, one field changed: a new job, its own checkpoint directory
    second = _submit(alice, go, name="ddp-resnet-lr2", env={"WANDB_PROJECT": "ddp-resnet", "LR": "0.2"})
    assert (second.pods, second.gpus_per_pod, second.mounts, second.secrets) == (
        2, 4, [{"source": "imagenet", "path": "/data", "read_only": True}], SPEC["secrets"])
    assert second.env == {"WANDB_PROJECT": "ddp-resnet", "LR": "0.2"}
    assert alice.get(f"/api/v1/jobs/{second.pk}").json()["checkpoint"]["sub_path"].endswith(f"job-{second.pk}")


def test_the_demo_lab_declares_the_walkthrough_and_its_job_runs(settings, tmp_path, client_for, go, monkeypatch):
    """``manage.py demo``: the sources, the W&B secret (a stand-in value unless DEMO_WANDB_API_KEY is set) and
    the template are there; bob submits from it, alice approves (vision approves jobs over 4 GPUs), it runs."""
    from django.contrib.auth import get_user_model

    from lab import demo
    from workloads.models import DataSource, DepartmentSecret

    settings.DATA_DIR = str(tmp_path)
    monkeypatch.delenv("DEMO_WANDB_API_KEY", raising=False)
    demo.seed(jobs=False)
    assert sorted(DataSource.objects.values_list("name", "kind", "writable")) == [
        ("imagenet", "dataset", False), ("nlp-scratch", "pvc", True), ("robotics-scratch", "pvc", True),
        ("vision-scratch", "pvc", True)]
    assert DepartmentSecret.objects.get(department__slug="vision", name="wandb").values == {
        "api_key": demo.DEMO_WANDB_KEY}
    users = get_user_model().objects
    bob, alice = client_for(users.get(username="bob")), client_for(users.get(username="alice"))
    assert {s["name"] for s in bob.get("/api/v1/data-sources").json()["results"]} == {"imagenet", "vision-scratch"}
    job = _submit(bob, go)
    assert job.state == JobState.PENDING_APPROVAL
    r = go(alice.post, f"/api/v1/approvals/{job.pk}/approve", {"comment": "walk-through"}, format="json")
    assert r.status_code == 200, r.json()
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.reason_message
    pods = list(SimPod.objects.filter(job_id=job.pk).order_by("index"))
    assert [(p.env["NODE_RANK"], p.env["PORTAL_NPROC_PER_NODE"], p.env["PORTAL_CHECKPOINT_DIR"]) for p in pods] == [
        ("0", "4", "/checkpoint"), ("1", "4", "/checkpoint")]
    assert Path({m["path"]: m for m in pods[0].mounts}["/checkpoint"]["dir"]).is_relative_to(tmp_path)


def _env(pod) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_the_walkthrough_job_at_the_manifest_level_on_kubernetes(kube, lab, declared, client_for, go, submit):
    for claim in ("imagenet", "vision-scratch"):  # the claims the cluster's admin made in the namespace
        kube.add_pvc("gpu-vision", claim, access_modes=("ReadWriteMany",), volume_name=f"{claim}-gpu-vision")
    job = _submit(client_for(lab.alice), go)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED, job.reason_message
    base = f"job-{job.pk}-a1"

    service = kube.services[("gpu-vision", base)]
    labels = {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/installation": "lab-portal",
              "gpu-portal.io/job-id": str(job.pk), "gpu-portal.io/attempt": "1"}
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == labels
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(29500, 29500)]
    assert kube.secret_text("gpu-vision", "portal-secret-wandb") == {"api_key": TOKEN}

    sub_path = f"checkpoints/job-{job.pk}"
    for i in range(2):
        pod = kube.pod("gpu-vision", f"{base}-{i}")
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        assert (spec["hostname"], spec["subdomain"]) == (f"{base}-{i}", base)
        assert {k: v for k, v in labels.items()} == {k: pod["metadata"]["labels"][k] for k in labels}
        assert pod["metadata"]["labels"]["gpu-portal.io/pod-index"] == str(i)
        assert container["command"] == ["sh", "-c", TORCHRUN]
        env = _env(pod)
        assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK",
                                    "PORTAL_NPROC_PER_NODE", "PORTAL_CHECKPOINT_DIR", "WANDB_PROJECT")} == {
            "MASTER_ADDR": f"{base}-0.{base}", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": str(i),
            "NODE_RANK": str(i), "PORTAL_NPROC_PER_NODE": "4", "PORTAL_CHECKPOINT_DIR": "/checkpoint",
            "WANDB_PROJECT": "ddp-resnet"}
        assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "portal-secret-wandb", "key": "api_key"}}
        assert TOKEN not in json.dumps(pod)
        volumes = {v["name"]: v for v in spec["volumes"]}
        claims = {v["persistentVolumeClaim"]["claimName"]: v for v in volumes.values() if "persistentVolumeClaim" in v}
        assert claims["imagenet"]["persistentVolumeClaim"].get("readOnly") is True
        assert not claims["vision-scratch"]["persistentVolumeClaim"].get("readOnly")
        shm = [v for v in volumes.values() if "emptyDir" in v]
        assert [v["emptyDir"] for v in shm] == [{"medium": "Memory", "sizeLimit": "16384Mi"}]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/data"]["readOnly"] is True and mounts["/data"]["name"] == claims["imagenet"]["name"]
        assert mounts["/checkpoint"]["subPath"] == sub_path and not mounts["/checkpoint"].get("readOnly")
        assert mounts["/dev/shm"]["name"] == shm[0]["name"]
        # restricted: non-root, no escalation, no capabilities, RuntimeDefault seccomp, no token, no host
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert spec["automountServiceAccountToken"] is False
        assert not (spec["hostNetwork"] or spec["hostPID"] or spec["hostIPC"])
        resources = container["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "4"
        kube.run("gpu-vision", f"{base}-{i}")
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    # preempted (through the Eviction API): attempt 2 gets a new Service and pods on the same sub-path
    rt = go(submit, lab.amy, gpus=4, tier="realtime", name="eval-server")
    _preempt(go, job, rt)
    for i in range(2):
        kube.finish_termination("gpu-vision", f"{base}-{i}")
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.QUEUED, 2), job.reason_message
    assert ("gpu-vision", base) not in kube.services
    go(client_for(lab.amy).post, f"/api/v1/jobs/{rt.pk}/cancel")
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED, job.reason_message
    assert ("gpu-vision", f"job-{job.pk}-a2") in kube.services
    for i in range(2):
        pod = kube.pod("gpu-vision", f"job-{job.pk}-a2-{i}")
        mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["/checkpoint"]["subPath"] == sub_path and _env(pod)["PORTAL_ATTEMPT"] == "2"


def _as_job_42(obj, job_id: int):
    """A manifest as docs/workloads.md prints it: the job's id made 42 (in names, labels, PORTAL_JOB_ID)."""
    if isinstance(obj, dict):
        if obj.get("name") == "PORTAL_JOB_ID" and "value" in obj:
            return {**obj, "value": "42"}
        return {k: "42" if k == "gpu-portal.io/job-id" else _as_job_42(v, job_id) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_as_job_42(v, job_id) for v in obj]
    return re.sub(rf"job-{job_id}(?!\d)", "job-42", obj) if isinstance(obj, str) else obj


def _documented_manifests() -> list[dict]:
    """The YAML blocks of the walk-through that are Kubernetes objects, in the order the doc shows them."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    section = text.split("## Walk-through", 1)[1].split("\n## ", 1)[0]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, flags=re.S)]
    return [b for b in blocks if isinstance(b, dict) and "apiVersion" in b]


def test_the_docs_show_every_manifest_exactly_as_the_portal_sends_it(kube, lab, declared, client_for, go):
    """docs/workloads.md prints the owned Secret, the headless Service and pod 0 of the walk-through job as
    the portal sends them to the API server; they are compared here with what it sent (the fake's request log),
    so a change to the pod spec cannot leave the doc behind."""
    for claim in ("imagenet", "vision-scratch"):
        kube.add_pvc("gpu-vision", claim, access_modes=("ReadWriteMany",), volume_name=f"{claim}-gpu-vision")
    job = _submit(client_for(lab.alice), go)
    go(run_cycle)
    sent = {(r.body["kind"], r.body["metadata"]["name"]): r.body for r in kube.requests
            if r.method == "POST" and r.path.startswith("/api/v1/namespaces/gpu-vision/") and r.body}
    secret = sent[("Secret", "portal-secret-wandb")]
    assert base64.b64decode(secret["data"]["api_key"]).decode() == TOKEN
    secret = {**secret, "data": {"api_key": "<base64 of the key>"}}
    base = f"job-{job.pk}-a1"
    created = [secret, sent[("Service", base)], sent[("Pod", f"{base}-0")]]
    assert _documented_manifests() == [_as_job_42(m, job.pk) for m in created]
    # pod 1 differs from pod 0 only where the doc says: its index, name, host name, node and rank
    pod0, pod1 = (_as_job_42(sent[("Pod", f"{base}-{i}")], job.pk) for i in range(2))
    assert pod1["metadata"]["labels"]["gpu-portal.io/pod-index"] == "1" and pod1["spec"]["hostname"] == "job-42-a1-1"
    env1 = {e["name"]: e.get("value") for e in pod1["spec"]["containers"][0]["env"]}
    assert (env1["RANK"], env1["NODE_RANK"], env1["PORTAL_NODE_RANK"]) == ("1", "1", "1")
    assert env1["MASTER_ADDR"] == "job-42-a1-0.job-42-a1"
    terms = pod1["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-1"]
    for pod in (pod0, pod1):
        pod["metadata"]["name"] = pod["spec"]["hostname"] = "x"
        pod["metadata"]["labels"]["gpu-portal.io/pod-index"] = "x"
        pod["spec"]["affinity"] = None
        pod["spec"]["containers"][0]["env"] = [e for e in pod["spec"]["containers"][0]["env"]
                                               if e["name"] not in ("RANK", "NODE_RANK", "PORTAL_NODE_RANK")]
    assert pod0 == pod1
    assert not any(kind == "PodDisruptionBudget" for kind, _ in sent)  # the job asks for none (step 3.4)
