"""deploy/ grants exactly what the backend uses: every request the adapter makes in a full job lifecycle
(against the fake API) must be allowed by the RBAC in deploy/, and the RBAC grants nothing dangerous."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from scheduling.backends.kube.checkpoints import CleanupPending
from scheduling.backends.kube.podspec import checkpoint_cleanup_name
from scheduling.backends.kube.routes import RouteConfig
from workloads.podsecrets import OwnedSecret, PodSecrets, SecretEnv

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SA = ("gpu-portal", "gpu-portal-system")


@functools.cache
def _documents():
    return tuple(doc for path in sorted(DEPLOY.rglob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
                 if doc and doc.get("kind") != "Kustomization")


def documents():
    return iter(_documents())


def bound_rules():
    """(rules, namespace or None for cluster-wide) granted to the portal's ServiceAccount."""
    docs = list(documents())
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    out = []
    for d in docs:
        if d["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any((s["name"], s.get("namespace")) == SA for s in d["subjects"]):
            continue
        scope = None if d["kind"] == "ClusterRoleBinding" else d["metadata"]["namespace"]
        out.append((roles[d["roleRef"]["name"]], scope))
    return out


def allowed(group, resource, verb, namespace, name):
    for rules, scope in bound_rules():
        if scope is not None and scope != namespace:
            continue
        for rule in rules:
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                if "resourceNames" not in rule or name in rule["resourceNames"]:
                    return True
    return False


PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)"
                  r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$")


def rbac_of(request):
    m = PATH.match(request.path)
    assert m, request.path
    resource = m["res"] + (f"/{m['sub']}" if m["sub"] else "")
    if request.method == "GET":
        verb = "get" if m["name"] else ("watch" if request.query.get("watch") == "true" else "list")
    else:
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[request.method]
    return m["group"] or "", resource, verb, m["ns"], m["name"]


def test_every_request_of_a_job_lifecycle_is_allowed(kube_fake, kube_backend, make_podset):
    ns = "gpu-vision"  # the example job namespace in deploy/job-namespace
    kube_fake.add_namespace(ns)
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    for name in ("ai-realtime", "ai-elastic", "ai-backfill"):
        del kube_fake.priority_classes[name]
    kube_backend.ensure_priority_classes({"ai-realtime": 1000000, "ai-elastic": 100000, "ai-backfill": 1000})
    kube_backend.ensure_priority_classes({"ai-realtime": 1000000, "ai-elastic": 100000, "ai-backfill": 10},
                                         descriptions={"ai-elastic": "x"})
    owned = PodSecrets(env=(SecretEnv("TOKEN", "portal-secret-t", "k"),),
                       owned=(OwnedSecret(name="portal-secret-t", data=(("k", "v"),)),))
    podset = make_podset(namespace=ns, pods=2, gpus_per_pod=1, pdb_min_available=1, secrets=owned)
    kube_backend.ensure_pods(podset)
    kube_backend.ensure_pods(podset)
    rotated = PodSecrets(owned=(OwnedSecret(name="portal-secret-t", data=(("k", "w"),)),))
    kube_backend.ensure_pods(make_podset(namespace=ns, pods=2, gpus_per_pod=1, secrets=rotated))
    kube_backend.admit(podset, ("n1", "n1"))
    kube_fake.run(ns, podset.pod_name(0))
    kube_fake.run(ns, podset.pod_name(1))
    kube_backend.inventory()
    kube_backend.disruption_budgets()
    kube_backend.pdb_coverage()
    list(kube_backend.logs(job_id=42, attempt=1, namespace=ns))
    watch = kube_backend.watch_pods(resource_version="1", timeout_s=1)
    next(iter(watch))
    watch.stop()
    kube_backend.evict(job_id=42, attempt=1, namespace=ns)
    kube_backend.delete_pods(job_id=42, attempt=1, namespace=ns)
    started = make_podset(namespace=ns, job_id=43, pods=2, gpus_per_pod=1, pdb_min_available=1)
    kube_backend.start(started, ("n1", "n1"))  # how the portal starts jobs: created at admission
    kube_backend.start(started, ("n1", "n1"), fresh=False)
    kube_backend.attempt_pods(job_id=43, attempt=1, namespace=ns)
    assert kube_backend.delete_owned_secret(namespace=ns, name="portal-secret-t")  # its department secret deleted
    # an expired checkpoint directory: the cleanup pod is created, read, and deleted once it is done
    kube_fake.add_pvc(ns, "scratch", volume_name="pv-scratch")
    expired = {"namespace": ns, "claim_name": "scratch", "storage": "c/scratch", "sub_path": "checkpoints/job-43",
               "job_id": 43}
    with pytest.raises(CleanupPending):
        kube_backend.delete_checkpoint(**expired)
    kube_fake.run(ns, checkpoint_cleanup_name(43))
    kube_fake.terminate(ns, checkpoint_cleanup_name(43), exit_code=0)
    kube_backend.delete_checkpoint(**expired)
    # a session's route: its Service and Ingress, made with the attempt and deleted with it
    kube_backend.routes = RouteConfig(ingress_class="nginx")
    session = make_podset(namespace=ns, job_id=44, kind="session", port=8888, tier="realtime",
                          priority_class="ai-realtime")
    kube_backend.start(session, ("n1",))
    kube_backend.start(session, ("n1",), fresh=False)
    kube_backend.remove_pods(job_id=44, attempt=1, namespace=ns)

    used = {rbac_of(r) for r in kube_fake.requests}
    denied = [u for u in used if not allowed(*u)]
    assert not denied, denied
    kinds = {(g, r, v) for g, r, v, _, _ in used}
    assert ("", "pods/eviction", "create") in kinds and ("", "pods", "watch") in kinds
    assert {("", "secrets", v) for v in ("create", "get", "update", "delete")} <= kinds
    assert {("networking.k8s.io", "ingresses", v) for v in ("create", "get", "delete")} <= kinds


def test_priority_class_writes_are_limited_to_the_tier_classes():
    assert allowed("scheduling.k8s.io", "priorityclasses", "update", None, "ai-realtime")
    assert not allowed("scheduling.k8s.io", "priorityclasses", "update", None, "system-cluster-critical")
    assert not allowed("scheduling.k8s.io", "priorityclasses", "delete", None, "someone-elses")


def test_job_writes_only_in_job_namespaces():
    assert allowed("", "pods", "create", "gpu-vision", None)
    for verb in ("create", "get", "update", "patch", "delete"):
        assert allowed("", "secrets", verb, "gpu-vision", "portal-secret-x")
        assert not allowed("", "secrets", verb, "kube-system", "x")
        assert not allowed("", "secrets", verb, "gpu-portal-system", "gpu-portal")  # the portal's own config
    for verb in ("list", "watch"):  # never every value of a namespace at once
        assert not allowed("", "secrets", verb, "gpu-vision", None)
    assert not allowed("", "pods", "create", "kube-system", None)
    assert not allowed("", "pods", "delete", "default", "x")


@pytest.mark.parametrize(("group", "resource"), [
    ("", "configmaps"), ("", "pods/exec"), ("", "pods/attach"), ("", "pods/portforward"),
    ("", "serviceaccounts/token"), ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"), ("", "nodes"),
])
def test_nothing_dangerous_is_granted(group, resource):
    for verb in ("get", "list", "create", "update", "patch", "delete"):
        if resource == "nodes" and verb in ("get", "list"):
            continue
        assert not allowed(group, resource, verb, "gpu-vision", "x"), (resource, verb)
    for rules, _ in bound_rules():
        for rule in rules:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]


def test_job_namespaces_enforce_restricted_pod_security():
    namespaces = [d for d in documents() if d["kind"] == "Namespace"]
    assert namespaces
    for ns in namespaces:
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_portal_deployments_are_restricted_and_configured():
    deployments = {d["metadata"]["name"]: d for d in documents() if d["kind"] == "Deployment"}
    assert set(deployments) == {"gpu-portal-web", "gpu-portal-worker", "gpu-portal-beat", "gpu-portal-watcher"}
    for d in deployments.values():
        spec = d["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == "gpu-portal"
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c["image"].startswith("ghcr.io/gpu-portal/portal:")
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            refs = {next(iter(r.values()))["name"] for r in c["envFrom"]}
            assert refs == {"gpu-portal"}
    commands = {n: d["spec"]["template"]["spec"]["containers"][0]["command"] for n, d in deployments.items()}
    assert commands["gpu-portal-watcher"] == ["python", "manage.py", "watch_pods"]
    inits = deployments["gpu-portal-worker"]["spec"]["template"]["spec"]["initContainers"]
    assert inits[0]["command"] == ["python", "manage.py", "ensure_priority_classes"]
    queues = next(a for a in commands["gpu-portal-worker"] if a.startswith("--queues="))[len("--queues="):]
    assert set(queues.split(",")) == {"default"} | {r["queue"] for r in settings.CELERY_TASK_ROUTES.values()}
    commands_dir = Path(__file__).resolve().parents[2] / "scheduling" / "management" / "commands"
    if commands_dir.is_dir():  # the management commands the manifests run exist
        assert {"watch_pods.py", "ensure_priority_classes.py"} <= {p.name for p in commands_dir.iterdir()}
    for single in ("gpu-portal-beat", "gpu-portal-watcher"):
        assert deployments[single]["spec"]["replicas"] == 1
        assert deployments[single]["spec"]["strategy"]["type"] == "Recreate"
    config = next(d for d in documents() if d["kind"] == "ConfigMap")
    assert config["data"]["SCHEDULING_BACKEND"] == "kubernetes"
    secret = next(d for d in documents() if d["kind"] == "Secret")
    assert {"DATABASE_URL", "CELERY_BROKER_URL"} <= set(secret["stringData"])


def test_shipped_priority_classes_match_the_policy_names():
    classes = {d["metadata"]["name"]: d for d in documents() if d["kind"] == "PriorityClass"}
    assert classes["ai-realtime"]["value"] == 1000000
    assert classes["ai-realtime"]["value"] > classes["ai-elastic"]["value"] > classes["ai-backfill"]["value"]
    for pc in classes.values():
        assert pc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"
        assert pc["preemptionPolicy"] == "Never"
