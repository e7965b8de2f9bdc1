"""The fake Kubernetes API enforces the API server's rules the portal relies on, rule by rule (so it cannot
silently drift).

These tests use the official client directly, not the portal's adapter: they pin the fake's behaviour to the
API server's (status codes and reasons), which the contract tests then rely on.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.fakes.k8s_api import SchedulingError

NS = "team-a"
GATE = "example.com/gate"


def call(fn, *args, **kwargs):
    """(status, body) of one request, whatever the status."""
    try:
        resp = fn(*args, _preload_content=False, **kwargs)
        return resp.status, json.loads(resp.data or b"{}")
    except ApiException as exc:
        return exc.status, json.loads(exc.body or "{}")


def pod(name="p", *, gates=(GATE,), gpu="1", requests=None, affinity=True, priority="ai-elastic", **spec_extra):
    limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpu}
    container = {
        "name": "main", "image": "busybox",
        "resources": {"limits": limits, "requests": requests if requests is not None else dict(limits)},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    spec = {
        "containers": [container],
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "restartPolicy": "Never",
        "schedulingGates": [{"name": g} for g in gates],
        "priorityClassName": priority,
    }
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100"]}]}]}}}
    spec.update(spec_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "x"}}, "spec": spec}


@pytest.fixture
def core(raw_api):
    return k8s.CoreV1Api(raw_api)


@pytest.fixture
def created(core):
    status, body = call(core.create_namespaced_pod, NS, pod())
    assert status == 201, body
    return body


def patch(core, ops, name="p"):
    return call(core.patch_namespaced_pod, name, NS, ops)


TERMS = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"


# ------------------------------------------------------------------------------------------- names


def test_duplicate_pod_name_is_409_already_exists(core, created):
    status, body = call(core.create_namespaced_pod, NS, pod())
    assert (status, body["reason"]) == (409, "AlreadyExists")


def test_same_name_in_another_namespace_is_fine(core, created):
    assert call(core.create_namespaced_pod, "team-b", pod())[0] == 201


def test_pod_in_a_missing_namespace_is_404(core):
    assert call(core.create_namespaced_pod, "nope", pod())[0] == 404


# ------------------------------------------------------------------------------------------- scheduling gates


def test_gates_can_only_be_removed(core, created):
    status, body = patch(core, [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "other"}}])
    assert status == 422 and "only deletion is allowed" in body["message"]
    assert patch(core, [{"op": "remove", "path": "/spec/schedulingGates/0"}])[0] == 200
    status, body = patch(core, [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}])
    assert status == 422  # and never re-added


def test_ungated_pod_loses_the_scheduling_gated_condition(core, created):
    patch(core, [{"op": "remove", "path": "/spec/schedulingGates/0"}])
    _, body = call(core.read_namespaced_pod, "p", NS)
    assert not [c for c in body["status"]["conditions"] if c.get("reason") == "SchedulingGated"]


def test_gated_pod_cannot_be_bound(kube_fake, created):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    with pytest.raises(SchedulingError, match="gated"):
        kube_fake.bind(NS, "p", "n1")


# ------------------------------------------------------------------------------------------- node affinity


def test_affinity_may_be_narrowed_while_gated(core, created):
    ops = [{"op": "add", "path": f"{TERMS}/0/matchFields",
            "value": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
           {"op": "add", "path": f"{TERMS}/0/matchExpressions/-",
            "value": {"key": "zone", "operator": "In", "values": ["z1"]}},
           {"op": "add", "path": "/spec/nodeSelector", "value": {"disk": "ssd"}}]
    assert patch(core, ops)[0] == 200


@pytest.mark.parametrize("ops", [
    [{"op": "remove", "path": f"{TERMS}/0/matchExpressions/0"}],  # dropping a requirement widens
    [{"op": "replace", "path": f"{TERMS}/0/matchExpressions/0/values", "value": ["a100", "h100"]}],
    [{"op": "add", "path": f"{TERMS}/-", "value": {"matchExpressions": [
        {"key": "gpu-type", "operator": "In", "values": ["h100"]}]}}],  # another ORed term widens
    [{"op": "remove", "path": "/spec/affinity"}],
])
def test_affinity_may_not_be_widened_while_gated(core, created, ops):
    status, body = patch(core, ops)
    assert status == 422, body


def test_gated_pod_without_affinity_may_get_one(core):
    call(core.create_namespaced_pod, NS, pod(affinity=False))
    ops = [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}]
    assert patch(core, ops)[0] == 200


def test_affinity_is_immutable_once_ungated(core, created):
    assert patch(core, [{"op": "remove", "path": "/spec/schedulingGates/0"}])[0] == 200
    ops = [{"op": "add", "path": f"{TERMS}/0/matchFields",
            "value": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    assert patch(core, ops)[0] == 422


def test_scheduler_helper_honours_affinity_cordons_taints_and_capacity(kube_fake, core):
    kube_fake.add_node("h1", gpus=8, labels={"gpu-type": "h100"})
    kube_fake.add_node("small", gpus=1, labels={"gpu-type": "a100"})
    kube_fake.add_node("cordoned", gpus=8, labels={"gpu-type": "a100"}, unschedulable=True)
    kube_fake.add_node("tainted", gpus=8, labels={"gpu-type": "a100"},
                       taints=[{"key": "dedicated", "effect": "NoSchedule"}])
    kube_fake.add_node("ok", gpus=8, labels={"gpu-type": "a100"})
    call(core.create_namespaced_pod, NS, pod(gates=(), gpu="2"))
    for node, why in (("h1", "affinity"), ("small", "insufficient"), ("cordoned", "cordoned"),
                      ("tainted", "taint")):
        assert any(why in p for p in kube_fake.node_fits(kube_fake.pod(NS, "p"), node)), node
    assert kube_fake.bind(NS, "p") == "ok"


# ------------------------------------------------------------------------------------------- priority classes


def test_unknown_priority_class_is_403(core):
    status, body = call(core.create_namespaced_pod, NS, pod(priority="nope"))
    assert status == 403 and "no PriorityClass with name nope was found" in body["message"]


def test_priority_is_resolved_and_class_name_immutable(core, created):
    assert created["spec"]["priority"] == 100000
    status, body = patch(core, [{"op": "replace", "path": "/spec/priorityClassName", "value": "ai-realtime"}])
    assert status == 422 and "priorityClassName" in body["message"]


def test_priority_class_value_and_policy_are_immutable(raw_api):
    api = k8s.SchedulingV1Api(raw_api)
    assert call(api.patch_priority_class, "ai-elastic", {"value": 5})[0] == 422
    assert call(api.patch_priority_class, "ai-elastic", {"preemptionPolicy": "PreemptLowerPriority"})[0] == 422
    assert call(api.patch_priority_class, "ai-elastic", {"description": "fine"})[0] == 200


def test_priority_class_names_and_duplicates(raw_api):
    api = k8s.SchedulingV1Api(raw_api)
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-x"},
            "value": 1}
    assert call(api.create_priority_class, body)[0] == 403
    body["metadata"]["name"] = "ai-elastic"
    assert call(api.create_priority_class, body)[1]["reason"] == "AlreadyExists"


# ------------------------------------------------------------------------------------------- extended resources


@pytest.mark.parametrize(("gpu", "requests", "message"), [
    ("0.5", None, "must be an integer"),
    ("500m", None, "must be an integer"),
    ("1", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}, "must be equal to nvidia.com/gpu limit"),
])
def test_extended_resources_are_integers_with_requests_equal_to_limits(core, gpu, requests, message):
    status, body = call(core.create_namespaced_pod, NS, pod(gpu=gpu, requests=requests))
    assert status == 422 and message in body["message"]


def test_extended_resource_request_without_limit_is_invalid(core):
    p = pod()
    del p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    status, body = call(core.create_namespaced_pod, NS, p)
    assert status == 422 and "Limit must be set" in body["message"]


def test_extended_resource_limit_alone_defaults_the_request(core):
    p = pod()
    del p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
    status, body = call(core.create_namespaced_pod, NS, p)
    assert status == 201 and body["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"


# ------------------------------------------------------------------------------------------- resourceVersion


def test_stale_resource_version_is_409(core, created):
    rv = created["metadata"]["resourceVersion"]
    assert patch(core, {"metadata": {"labels": {"a": "1"}}})[0] == 200  # moves the version on
    status, body = patch(core, [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                                {"op": "remove", "path": "/spec/schedulingGates/0"}])
    assert (status, body["reason"]) == (409, "Conflict")
    status, body = call(core.patch_namespaced_pod, "p", NS,
                        {"metadata": {"resourceVersion": rv, "labels": {"b": "2"}}})
    assert status == 409
    _, fresh = call(core.read_namespaced_pod, "p", NS)
    fresh["metadata"]["resourceVersion"] = rv
    assert call(core.replace_namespaced_pod, "p", NS, fresh)[0] == 409


def test_failed_json_patch_test_op_is_422_like_the_api_server(core, created):
    status, body = patch(core, [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"}])
    assert status == 422 and "test operation does not apply" in body["message"]


def test_current_resource_version_is_accepted_and_bumped(core, created):
    rv = created["metadata"]["resourceVersion"]
    status, body = patch(core, [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                                {"op": "remove", "path": "/spec/schedulingGates/0"}])
    assert status == 200 and int(body["metadata"]["resourceVersion"]) > int(rv)


# ------------------------------------------------------------------------------------------- eviction & PDB


def _pdb(raw_api, min_available, name="pdb"):
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "x"}}}}
    assert call(k8s.PolicyV1Api(raw_api).create_namespaced_pod_disruption_budget, NS, body)[0] == 201


def _evict(core, name="p"):
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
    return call(core.create_namespaced_pod_eviction, name, NS, body)


@pytest.fixture
def two_running(kube_fake, core):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    for name in ("p", "q"):
        call(core.create_namespaced_pod, NS, pod(name, gates=()))
        kube_fake.run(NS, name, "n1")


def test_eviction_429_when_the_pdb_allows_no_disruption(kube_fake, raw_api, core, two_running):
    _pdb(raw_api, 2)
    status, body = _evict(core)
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert not kube_fake.pod(NS, "p")["metadata"].get("deletionTimestamp")


def test_eviction_allowed_then_budget_used_up(kube_fake, raw_api, core, two_running):
    _pdb(raw_api, 1)
    _, status = call(k8s.PolicyV1Api(raw_api).read_namespaced_pod_disruption_budget, "pdb", NS)
    assert status["status"]["disruptionsAllowed"] == 1
    assert _evict(core, "p")[0] == 201
    evicted = kube_fake.pod(NS, "p")
    assert evicted["metadata"]["deletionTimestamp"]
    assert [c["reason"] for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
        "EvictionByEvictionAPI"]
    assert _evict(core, "q")[0] == 429  # p is terminating, so q is the last healthy pod


def test_percentage_min_available(raw_api, core, two_running):
    _pdb(raw_api, "100%")
    assert _evict(core)[0] == 429


def test_pending_pods_are_evicted_without_a_pdb_check(raw_api, core, kube_fake):
    call(core.create_namespaced_pod, NS, pod())
    _pdb(raw_api, 5)
    assert _evict(core)[0] == 201
    assert kube_fake.pod(NS, "p") is None  # never ran: gone at once


def test_two_pdbs_on_one_pod_is_500(raw_api, core, two_running):
    _pdb(raw_api, 0, "one")
    _pdb(raw_api, 0, "two")
    assert _evict(core)[0] == 500


def _raw_pdb(raw_api, name, spec):
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec}
    assert call(k8s.PolicyV1Api(raw_api).create_namespaced_pod_disruption_budget, NS, body)[0] == 201


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, 2),  # policy/v1: an empty selector selects every pod of the namespace
        (None, 0),  # a null selector selects none
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]}, 2),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, 0),
        ({"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, 2),
    ],
)
def test_pdb_selector_semantics(raw_api, two_running, selector, expected):
    spec = {"maxUnavailable": 0}
    if selector is not None:
        spec["selector"] = selector
    _raw_pdb(raw_api, "sel", spec)
    _, body = call(k8s.PolicyV1Api(raw_api).read_namespaced_pod_disruption_budget, "sel", NS)
    assert body["status"]["expectedPods"] == expected


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [({"minAvailable": 1}, 1), ({"minAvailable": "50%"}, 0), ({"maxUnavailable": 1}, 0)],
)
def test_pdb_over_bare_pods_needs_an_integer_min_available(raw_api, two_running, spec, allowed):
    """The disruption controller needs a controller's scale for maxUnavailable and percentages; bare pods have
    none, so it fails safe (as the Kubernetes docs say: arbitrary workloads only with an integer minAvailable)."""
    _raw_pdb(raw_api, "bare", {**spec, "selector": {"matchLabels": {"app": "x"}}})
    _, body = call(k8s.PolicyV1Api(raw_api).read_namespaced_pod_disruption_budget, "bare", NS)
    assert body["status"]["disruptionsAllowed"] == allowed


def test_pdb_list_has_the_api_shape(raw_api, two_running):
    _pdb(raw_api, 1)
    status, body = call(k8s.PolicyV1Api(raw_api).list_pod_disruption_budget_for_all_namespaces)
    assert status == 200 and (body["kind"], body["apiVersion"]) == ("PodDisruptionBudgetList", "policy/v1")
    (item,) = body["items"]
    assert item["metadata"]["namespace"] == NS and item["spec"]["selector"] == {"matchLabels": {"app": "x"}}
    assert item["status"]["disruptionsAllowed"] == 1 and item["status"]["observedGeneration"] == 1


@pytest.mark.parametrize(
    ("spec", "status"),
    [
        # IfHealthyBudget (default): the unready pod goes while the healthy ones meet the budget, uncharged
        ({"minAvailable": 1}, 201),
        # ... not when they do not (and the budget has no room)
        ({"minAvailable": 2}, 429),
        # AlwaysAllow: an unready pod always goes
        ({"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"}, 201),
    ],
)
def test_unready_pod_eviction_follows_the_unhealthy_pod_policy(kube_fake, raw_api, core, two_running, spec, status):
    def unready(p):
        p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    kube_fake._mutate_pod(NS, "p", unready)
    _raw_pdb(raw_api, "pdb", {**spec, "selector": {"matchLabels": {"app": "x"}}})
    assert _evict(core, "p")[0] == status


def test_eviction_of_a_missing_pod_is_404(core):
    assert _evict(core, "ghost")[0] == 404


def test_delete_of_a_running_pod_is_graceful(kube_fake, core, two_running):
    status, body = call(core.delete_namespaced_pod, "p", NS)
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    kube_fake.finish_termination(NS, "p")
    assert kube_fake.pod(NS, "p") is None


# ------------------------------------------------------------------------------------------- watch


def _watch(core, rv, timeout=1, **kwargs):
    resp = core.list_namespaced_pod(NS, watch=True, resource_version=rv, timeout_seconds=timeout,
                                    _preload_content=False, **kwargs)
    return [json.loads(line) for line in resp.data.decode().splitlines() if line]


def test_watch_from_a_recent_version_replays_events(core, created):
    rv = created["metadata"]["resourceVersion"]
    patch(core, {"metadata": {"labels": {"a": "1"}}})
    call(core.delete_namespaced_pod, "p", NS)
    assert [e["type"] for e in _watch(core, rv)] == ["MODIFIED", "DELETED"]


def test_watch_from_a_too_old_version_is_410_gone(kube_fake, core, created):
    rv = created["metadata"]["resourceVersion"]
    patch(core, {"metadata": {"labels": {"a": "1"}}})
    kube_fake.compact()
    (event,) = _watch(core, rv)
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_bounded_history_expires_old_versions(kube_fake, core, created):
    rv = created["metadata"]["resourceVersion"]
    for _ in range(kube_fake.history.maxlen + 1):
        kube_fake.touch(NS, "p")
    assert _watch(core, rv)[0]["object"]["code"] == 410


def test_watch_filters_by_label_and_reports_objects_leaving_the_selector(core, created):
    rv = created["metadata"]["resourceVersion"]
    patch(core, {"metadata": {"labels": {"app": "y"}}})
    events = _watch(core, rv, label_selector="app=x")
    assert [e["type"] for e in events] == ["DELETED"]


# ------------------------------------------------------------------------------------------- pod security


@pytest.mark.parametrize(("change", "violation"), [
    (lambda s: s.update(hostNetwork=True), "host namespaces"),
    (lambda s: s.update(hostPID=True), "host namespaces"),
    (lambda s: s["containers"][0]["securityContext"].update(privileged=True), "privileged"),
    (lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"), "allowPrivilegeEscalation"),
    (lambda s: s["containers"][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"], "drop": ["ALL"]}),
     "capabilities"),
    (lambda s: s["containers"][0]["securityContext"].update(capabilities={}), "capabilities"),
    (lambda s: s.update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]), "hostPath"),
    (lambda s: s["securityContext"].pop("runAsNonRoot"), "runAsNonRoot"),
    (lambda s: s["securityContext"].update(runAsUser=0), "runAsUser=0"),
    (lambda s: s["securityContext"].pop("seccompProfile"), "seccompProfile"),
    (lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]), "hostPort"),
])
def test_restricted_namespace_rejects_unsafe_pods(core, change, violation):
    p = pod()
    change(p["spec"])
    status, body = call(core.create_namespaced_pod, NS, p)
    assert status == 403 and 'violates PodSecurity "restricted:latest"' in body["message"]
    assert violation in body["message"]


def test_unrestricted_namespace_accepts_them(core):
    p = pod()
    p["spec"]["hostNetwork"] = True
    assert call(core.create_namespaced_pod, "default", p)[0] == 201


# ------------------------------------------------------------------------------------------- lists, faults


def test_list_selectors_and_pagination(kube_fake, core):
    for i in range(5):
        call(core.create_namespaced_pod, NS, pod(f"p{i}"))
    kube_fake.add_foreign_pod(NS, "done", node="n1", phase="Succeeded")
    page1 = core.list_pod_for_all_namespaces(limit=2, field_selector="status.phase!=Succeeded")
    assert len(page1.items) == 2 and page1.metadata._continue
    page2 = core.list_pod_for_all_namespaces(limit=10, _continue=page1.metadata._continue,
                                             field_selector="status.phase!=Succeeded")
    assert len(page2.items) == 3
    assert [p.metadata.name for p in core.list_namespaced_pod(NS, label_selector="app in (x),!nope").items] == [
        f"p{i}" for i in range(5)]
    assert call(core.list_namespaced_pod, NS, field_selector="spec.bogus=1")[0] == 400


def test_fault_injection_hooks(kube_fake, core, created):
    kube_fake.fail_next(2, status=503)
    assert call(core.read_namespaced_pod, "p", NS)[0] == 503
    assert call(core.read_namespaced_pod, "p", NS)[0] == 503
    assert call(core.read_namespaced_pod, "p", NS)[0] == 200
    kube_fake.fail_next(1, status=500, method="GET", after=1)
    assert call(core.read_namespaced_pod, "p", NS)[0] == 200
    assert call(core.read_namespaced_pod, "p", NS)[0] == 500
    kube_fake.race_next(lambda fake: fake.touch(NS, "p"), method="PATCH")
    rv = kube_fake.pod(NS, "p")["metadata"]["resourceVersion"]
    assert patch(core, {"metadata": {"resourceVersion": rv}})[0] == 409
    kube_fake.hang_next(1, seconds=1.0)
    with pytest.raises(Exception):  # noqa: B017 - urllib3 read timeout
        core.read_namespaced_pod("p", NS, _request_timeout=(1, 0.2))
    assert kube_fake.count("GET", "/pods/p$") == 6


def test_meet_next_answers_requests_in_flight_together_and_fails_one_alone(kube_fake, core, created):
    from concurrent.futures import ThreadPoolExecutor

    kube_fake.meet_next(3, method="GET", path="/pods/p$")
    with ThreadPoolExecutor(3) as pool:  # the client's pool keeps one connection per thread in flight
        assert list(pool.map(lambda _: call(core.read_namespaced_pod, "p", NS)[0], range(3))) == [200] * 3
    kube_fake.meet_next(2, seconds=0.2, method="GET", path="/pods/p$")
    status, body = call(core.read_namespaced_pod, "p", NS)  # alone: the other never comes
    assert status == 503 and "in flight at once" in body["message"]
    assert call(core.read_namespaced_pod, "p", NS)[0] == 503  # the meeting is off: no second wait
    assert call(core.read_namespaced_pod, "p", NS)[0] == 200


def test_logs_need_a_started_container(kube_fake, core, created):
    assert call(core.read_namespaced_pod_log, "p", NS)[0] == 400


# ------------------------------------------------------------------------------------------- quota


def test_gated_pods_count_against_a_namespace_quota(kube_fake, core):
    kube_fake.add_resource_quota(NS, "ceiling", {"requests.nvidia.com/gpu": "2", "pods": "10"})
    assert call(core.create_namespaced_pod, NS, pod("a", gpu="2"))[0] == 201  # gated, yet charged
    status, body = call(core.create_namespaced_pod, NS, pod("b", gpu="1"))
    assert status == 403 and body["reason"] == "Forbidden"
    assert "exceeded quota: ceiling" in body["message"] and "requests.nvidia.com/gpu=1" in body["message"]
    assert kube_fake.pod(NS, "b") is None


def test_quota_admission_runs_before_the_already_exists_check(kube_fake, core):
    kube_fake.add_resource_quota(NS, "ceiling", {"requests.nvidia.com/gpu": "3"})
    assert call(core.create_namespaced_pod, NS, pod("a", gpu="2"))[0] == 201
    # A duplicate that fits is charged by admission, then refused by storage: the quota is over-charged...
    assert call(core.create_namespaced_pod, NS, pod("b", gpu="1"))[0] == 201
    assert kube_fake.quota_used(NS, "ceiling")["requests.nvidia.com/gpu"] == 3
    kube_fake.resync_quotas()
    # ...and once the quota is full, a duplicate gets 403, not 409: existence cannot be probed by POSTing.
    status, body = call(core.create_namespaced_pod, NS, pod("a", gpu="2"))
    assert status == 403 and "exceeded quota" in body["message"]
    kube_fake.add_resource_quota("team-b", "roomy", {"requests.nvidia.com/gpu": "8"})
    assert call(core.create_namespaced_pod, "team-b", pod("a", gpu="2"))[0] == 201
    assert call(core.create_namespaced_pod, "team-b", pod("a", gpu="2"))[0] == 409
    assert kube_fake.quota_used("team-b", "roomy")["requests.nvidia.com/gpu"] == 4  # over-charged until resync
    kube_fake.resync_quotas("team-b")
    assert kube_fake.quota_used("team-b", "roomy")["requests.nvidia.com/gpu"] == 2


def test_a_deleted_pod_frees_its_quota(kube_fake, core):
    kube_fake.add_resource_quota(NS, "ceiling", {"pods": "1"})
    assert call(core.create_namespaced_pod, NS, pod("a"))[0] == 201
    assert call(core.create_namespaced_pod, NS, pod("b"))[0] == 403
    assert call(core.delete_namespaced_pod, "a", NS)[0] == 200  # gated, never bound: gone at once
    assert call(core.create_namespaced_pod, NS, pod("b"))[0] == 201


# ------------------------------------------------------------------------------------------- termination


def test_a_terminating_pod_holds_its_gpus_until_its_grace_has_passed(kube_fake, core):
    kube_fake.add_node("n1", gpus=1, labels={"gpu-type": "a100"})
    call(core.create_namespaced_pod, NS, pod("old", gates=(), terminationGracePeriodSeconds=30))
    kube_fake.run(NS, "old", "n1")
    status, body = call(core.delete_namespaced_pod, "old", NS)
    assert status == 200
    deadline = datetime.fromisoformat(body["metadata"]["deletionTimestamp"].replace("Z", "+00:00")).timestamp()
    assert 25 < deadline - time.time() <= 31  # the moment the grace period ends, not the moment of the delete
    call(core.create_namespaced_pod, NS, pod("new", gates=()))
    assert kube_fake.schedule(NS, "new") is None  # the GPU is still held
    cond = [c for c in kube_fake.pod(NS, "new")["status"]["conditions"] if c["type"] == "PodScheduled"][0]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert "insufficient nvidia.com/gpu" in cond["message"] and cond["lastTransitionTime"]
    kube_fake.advance(31)
    assert kube_fake.pod(NS, "old") is None  # the kubelet stopped it once the grace had passed
    assert kube_fake.schedule(NS, "new") == "n1"


def test_an_evicted_pod_terminates_with_its_grace_too(kube_fake, core, two_running):
    assert _evict(core)[0] == 201
    assert kube_fake.pod(NS, "p")["metadata"]["deletionTimestamp"]
    # deletionTimestamp has whole-second precision, as on a real API server: the 30 s grace may end up to a
    # second before eviction + 30 s, so the pod is checked a little earlier than that
    kube_fake.advance(28)
    assert kube_fake.pod(NS, "p") is not None
    kube_fake.advance(3)
    assert kube_fake.pod(NS, "p") is None


def test_a_pod_pinned_to_a_vanished_node_gets_a_scheduler_error(kube_fake, core):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    spec_pod = pod("p", gates=())
    spec_pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
    kube_fake.remove_node("n1")
    call(core.create_namespaced_pod, NS, spec_pod)
    assert kube_fake.schedule(NS, "p") is None
    cond = [c for c in kube_fake.pod(NS, "p")["status"]["conditions"] if c["type"] == "PodScheduled"][0]
    assert (cond["reason"], cond["message"]) == ("SchedulerError", 'nodeinfo not found for node name "n1"')


# ------------------------------------------------------------------------------------------- services


def service(name="gang", *, cluster_ip="None", selector=None, ports=None):
    spec = {"clusterIP": cluster_ip, "selector": {"app": "x"} if selector is None else selector,
            "ports": [{"port": 29500}] if ports is None else ports}
    if cluster_ip is None:
        del spec["clusterIP"]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def test_a_headless_service_is_created_read_listed_and_deleted(core):
    assert call(core.create_namespaced_service, NS, service())[0] == 201
    status, body = call(core.read_namespaced_service, "gang", NS)
    assert status == 200 and body["spec"]["clusterIP"] == "None"
    assert [s["metadata"]["name"] for s in call(core.list_namespaced_service, NS)[1]["items"]] == ["gang"]
    assert call(core.create_namespaced_service, NS, service())[1]["reason"] == "AlreadyExists"
    assert call(core.delete_namespaced_service, "gang", NS)[0] == 200
    assert call(core.delete_namespaced_service, "gang", NS)[0] == 404
    assert call(core.create_namespaced_service, "nowhere", service())[0] == 404


@pytest.mark.parametrize(
    "bad",
    [
        service(ports=[{"port": 80, "targetPort": 0}]),
        service(ports=[{"port": 80, "targetPort": "Http_Port"}]),
        service(cluster_ip="none"),  # "None" literally
        service(cluster_ip="10.0.0.5"),
        service(selector={}),  # a headless Service of pods selects them
        service(ports=[{"port": 0}]),
        service(ports=[{"port": 70000}]),
        service(name="1gang"),  # a DNS-1035 label starts with a letter
    ],
)
def test_a_service_that_is_not_headless_or_selects_nothing_is_422(core, bad):
    status, body = call(core.create_namespaced_service, NS, bad)
    assert status == 422, body
    assert body["reason"] == "Invalid"


def test_a_cluster_ip_service_gets_an_address_of_its_own(core):
    """A session's route: no clusterIP asked for, one allocated (as the API server's allocator does)."""
    status, body = call(core.create_namespaced_service, NS, service(cluster_ip=None))
    assert status == 201 and body["spec"]["type"] == "ClusterIP" and body["spec"]["clusterIP"].startswith("10.96.")


@pytest.mark.parametrize(("field", "value"), [("hostname", "Rank_0"), ("subdomain", "a" * 64), ("hostname", "-x")])
def test_a_pod_hostname_or_subdomain_must_be_a_dns_label(core, field, value):
    assert call(core.create_namespaced_pod, NS, pod(**{field: value}))[0] == 422


def test_a_service_publishes_its_pods_by_hostname_before_they_are_ready(core, kube_fake):
    assert call(core.create_namespaced_service, NS, {**service(), "spec": {**service()["spec"],
                                                                         "publishNotReadyAddresses": True}})[0] == 201
    assert call(core.create_namespaced_pod, NS, pod("p0", hostname="p0", subdomain="gang"))[0] == 201
    assert call(core.create_namespaced_pod, NS, pod("p1", hostname="p1", subdomain="other"))[0] == 201
    assert kube_fake.service_endpoints(NS, "gang") == ["p0.gang"]  # gated, not ready, still published
