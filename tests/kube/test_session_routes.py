"""A session's and a service's route on a real API server: ``KUBECONFIG=... pytest -m kube tests/kube``.

The session's pod, its ClusterIP Service and its Ingress are created with the attempt and removed with it; the
Service selects the pod (its selector is a subset of the pod's labels, and the API server's EndpointSlices
list the pod once it is ready); the Ingress's backend is that Service's port. A service's readiness is read
from its pod's Ready condition, which its readiness probe (an HTTP GET on busybox's httpd) sets. No GPUs and
no ingress controller are needed: the objects are asserted, not traffic through an ingress.

Skipped unless ``KUBECONFIG`` is set; creates a namespace ``gpu-portal-routes-<random>`` (PodSecurity
``restricted``) and deletes it afterwards. Also run on the fake API server (tests/fakes).
"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.kube.waiting import wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG"),
]

if os.environ.get("KUBECONFIG"):
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from scheduling.backends.base import PodSet
    from scheduling.backends.kube import KubernetesBackend
    from scheduling.backends.kube.routes import RouteConfig

NO_CONTAINERS = os.environ.get("KUBE_TEST_NO_CONTAINERS", "") not in ("", "0", "false")
RUN = uuid.uuid4().hex[:6]
NS = f"gpu-portal-routes-{RUN}"
CLASS = f"gpr-{RUN}-realtime"
# busybox's httpd: an app with a port and a path that answers once it serves
SERVE = ("sh", "-c", "mkdir -p /tmp/www && echo ok > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www")


@pytest.fixture(scope="module")
def backend():
    routes = RouteConfig(domain="sessions.example.test", auth_url="http://portal.example.test:8000",
                         portal_url="https://portal.example.test", ingress_class="nginx")
    b = KubernetesBackend(kubeconfig=os.environ["KUBECONFIG"], qps=20, burst=40, timeout_s=15, routes=routes,
                          installation=f"gpu-portal-test-{RUN}")
    core = k8s.CoreV1Api(b.api_client)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                               "pod-security.kubernetes.io/enforce-version": "latest"}}})
    b.ensure_priority_classes({CLASS: 1000000})
    yield b
    core.delete_namespace(NS, grace_period_seconds=0)
    try:
        k8s.SchedulingV1Api(b.api_client).delete_priority_class(CLASS)
    except ApiException:
        pass
    b.close()


@pytest.fixture(scope="module")
def node(backend):
    for n in k8s.CoreV1Api(backend.api_client).list_node().items:
        ready = any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        if ready and not n.spec.unschedulable and not any(t.effect == "NoSchedule" for t in n.spec.taints or []):
            return n.metadata.name
    pytest.skip("no schedulable worker node")


_IDS = iter(range(1, 10_000))


def routed_podset(kind: str, **overrides) -> PodSet:
    values = dict(job_id=next(_IDS), attempt=1, namespace=NS, department="vision", job_name="route test",
                  owner="tester", image="busybox:1.36", command=SERVE, env=(), pods=1, gpus_per_pod=0,
                  gpu_resource="nvidia.com/gpu", node_labels=(("kubernetes.io/os", "linux"),), cpu_millicores=50,
                  memory_mib=32, tier="realtime", priority_class=CLASS, max_runtime_s=600, termination_grace_s=2,
                  kind=kind, port=8080, readiness_path="/index.html")
    values.update(overrides)
    return PodSet(**values)


def test_a_sessions_pod_service_and_ingress_come_and_go_with_the_attempt(backend, node):
    core, net = k8s.CoreV1Api(backend.api_client), k8s.NetworkingV1Api(backend.api_client)
    ps = routed_podset("session")
    name = ps.pod_name(0)
    backend.start(ps, (node,))
    backend.start(ps, (node,), fresh=False)  # a retried start adopts all three
    pod, svc, ing = (core.read_namespaced_pod(name, NS), core.read_namespaced_service(name, NS),
                     net.read_namespaced_ingress(name, NS))
    assert svc.spec.type == "ClusterIP" and svc.spec.cluster_ip not in (None, "None")
    assert svc.spec.selector.items() <= pod.metadata.labels.items()
    assert [(p.name, p.port, p.target_port) for p in svc.spec.ports] == [("http", 80, 8080)]
    assert [(c.name, c.container_port) for c in pod.spec.containers[0].ports] == [("http", 8080)]
    assert pod.spec.containers[0].readiness_probe.http_get.path == "/index.html"
    [path] = ing.spec.rules[0].http.paths
    assert (ing.spec.ingress_class_name, ing.spec.rules[0].host, path.path) == (
        "nginx", f"s{ps.job_id}.sessions.example.test", f"/s/{ps.job_id}/")
    assert (path.backend.service.name, path.backend.service.port.name) == (name, "http")
    assert ing.metadata.annotations["nginx.ingress.kubernetes.io/auth-url"].endswith(
        f"/sessions/{ps.job_id}/auth?mode=nginx")
    backend.remove_pods(job_id=ps.job_id, attempt=1, namespace=NS)
    for read in (core.read_namespaced_service, net.read_namespaced_ingress):
        with pytest.raises(ApiException) as gone:
            read(name, NS)
        assert gone.value.status == 404
    wait_for(lambda: not backend.attempt_pods(job_id=ps.job_id, attempt=1, namespace=NS), what="pod gone")


def test_a_services_readiness_is_its_pods_ready_condition(backend, node):
    ps = routed_podset("service", max_runtime_s=1200)
    backend.start(ps, (node,))
    [state] = backend.attempt_pods(job_id=ps.job_id, attempt=1, namespace=NS)
    assert not state.ready or state.phase == "Running"
    state = wait_for(lambda: next((s for s in backend.attempt_pods(job_id=ps.job_id, attempt=1, namespace=NS)
                                   if s.ready), None), what="the readiness probe to pass")
    assert state.phase == "Running"
    if not NO_CONTAINERS:  # a real kubelet: the Service's endpoints list the ready pod
        discovery = k8s.DiscoveryV1Api(backend.api_client)
        slices = wait_for(lambda: [s for s in discovery.list_namespaced_endpoint_slice(
            NS, label_selector=f"kubernetes.io/service-name={ps.pod_name(0)}").items
            if any(e.conditions.ready for e in s.endpoints or [])], what="a ready endpoint")
        assert any(e.target_ref.name == ps.pod_name(0) for s in slices for e in s.endpoints)
    backend.delete_pods(job_id=ps.job_id, attempt=1, namespace=NS)
