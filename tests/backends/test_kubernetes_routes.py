"""A session's or service's route on Kubernetes: a ClusterIP Service whose selector is the pod's labels and an
Ingress behind the portal's forward auth, made with the attempt before its pod and deleted with it; the pod
declares its port and a readiness probe, and its readiness is read from the pod's Ready condition. The fake API
server checks that the manifests hold together (route_problems)."""

from __future__ import annotations

import pytest

from scheduling.backends.base import InvalidPodSpec
from scheduling.backends.kube import KubernetesBackend
from scheduling.backends.kube.routes import RouteConfig
from tests.fakes.k8s_fixtures import FLAVORS

NS = "team-a"
ROUTES = RouteConfig(url="https://sessions.lab.example", auth_url="http://portal-web.gpu-portal.svc:8000",
                     portal_url="https://gpu.lab.example", ingress_class="nginx")


@pytest.fixture
def gpu_nodes(kube_fake):
    kube_fake.add_node("gpu-0", gpus=8, labels={"gpu-type": "a100"})


@pytest.fixture
def routed(kube_fake, sleeps):
    backend = KubernetesBackend(host=kube_fake.url, flavors=FLAVORS, qps=0, timeout_s=2.0, connect_timeout_s=1.0,
                                routes=ROUTES, sleep=sleeps)
    yield backend
    backend.close()


def session(make_podset, **kw):
    return make_podset(kind="session", port=8888, readiness_path="/api/status", tier="realtime",
                       priority_class="ai-realtime", **kw)


def test_a_session_gets_a_service_and_an_ingress_that_hold_together(routed, kube_fake, make_podset, gpu_nodes):
    routed.start(session(make_podset), ("gpu-0",))
    posts = [r.path.rsplit("/", 1)[-1] for r in kube_fake.requests if r.method == "POST"]
    assert posts == ["services", "ingresses", "pods"]  # the route exists before its pod
    svc = kube_fake.services[(NS, "job-42-a1")]
    pod = kube_fake.pod(NS, "job-42-a1")
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["clusterIP"] != "None"
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8888, "protocol": "TCP"}]
    main = pod["spec"]["containers"][0]
    assert main["ports"] == [{"name": "http", "containerPort": 8888, "protocol": "TCP"}]
    assert main["readinessProbe"]["httpGet"] == {"path": "/api/status", "port": 8888}
    env = {e["name"]: e["value"] for e in main["env"]}
    assert (env["PORTAL_BASE_URL"], env["PORTAL_PORT"]) == ("/s/42/", "8888")
    ing = kube_fake.ingresses[(NS, "job-42-a1")]
    assert ing["spec"]["ingressClassName"] == "nginx"
    [rule] = ing["spec"]["rules"]
    assert rule["host"] == "sessions.lab.example"
    assert rule["http"]["paths"] == [{"path": "/s/42/", "pathType": "Prefix", "backend": {
        "service": {"name": "job-42-a1", "port": {"name": "http"}}}}]
    notes = ing["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/auth-url"] == (
        "http://portal-web.gpu-portal.svc:8000/sessions/42/auth?mode=nginx")
    assert notes["nginx.ingress.kubernetes.io/auth-signin"] == "https://gpu.lab.example/jobs/42/"
    assert kube_fake.route_problems(NS) == []


def test_the_fake_sees_a_route_that_would_not_answer(routed, kube_fake, make_podset, gpu_nodes):
    routed.start(session(make_podset), ("gpu-0",))
    kube_fake.services[(NS, "job-42-a1")]["spec"]["selector"]["gpu-portal.io/attempt"] = "2"
    kube_fake.ingresses[(NS, "job-42-a1")]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"][
        "name"] = "job-42-a9"
    assert kube_fake.route_problems(NS) == ["Service job-42-a1: its selector matches no pod",
                                            "Ingress job-42-a1: Service job-42-a9 does not exist"]


def test_the_route_goes_with_the_attempt(routed, kube_fake, make_podset, gpu_nodes):
    routed.start(session(make_podset), ("gpu-0",))
    routed.remove_pods(job_id=42, attempt=1, namespace=NS)
    assert kube_fake.services == {} and kube_fake.ingresses == {}
    routed.delete_pods(job_id=42, attempt=1, namespace=NS)  # twice: 404 is fine
    routed.start(session(make_podset, attempt=2), ("gpu-0",))
    assert set(kube_fake.services) == set(kube_fake.ingresses) == {(NS, "job-42-a2")}
    assert kube_fake.route_problems(NS) == []


def test_a_retried_start_adopts_its_route(routed, kube_fake, make_podset, gpu_nodes):
    routed.start(session(make_podset), ("gpu-0",))
    routed.start(session(make_podset), ("gpu-0",), fresh=False)
    assert set(kube_fake.ingresses) == {(NS, "job-42-a1")}


def test_without_an_ingress_class_only_the_service(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(kind="service", port=8000, readiness_path="/healthz", max_runtime_s=10**6),
                       ("gpu-0",))
    assert set(kube_fake.services) == {(NS, "job-42-a1")} and kube_fake.ingresses == {}
    pod = kube_fake.pod(NS, "job-42-a1")
    assert pod["spec"]["activeDeadlineSeconds"] == 10**6  # the horizon its hold covers: nothing runs uncharged
    assert kube_fake.route_problems(NS) == []


def test_readiness_is_the_pods_ready_condition(routed, kube_fake, make_podset, gpu_nodes):
    routed.start(session(make_podset), ("gpu-0",))
    [state] = routed.attempt_pods(job_id=42, attempt=1, namespace=NS)
    assert state.ready is False
    kube_fake.run(NS, "job-42-a1")
    [state] = routed.attempt_pods(job_id=42, attempt=1, namespace=NS)
    assert state.phase == "Running" and state.ready is True


@pytest.mark.parametrize("port", [None, 0, 70000])
def test_a_session_without_a_valid_port_is_refused(routed, make_podset, port):
    with pytest.raises(InvalidPodSpec, match="port"):
        routed.start(make_podset(kind="session", port=port), ("gpu-0",))
