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
ROUTES = RouteConfig(domain="sessions.lab.example", auth_url="http://portal-web.gpu-portal.svc:8000",
                     portal_url="https://gpu.lab.example", ingress_class="nginx", tls_secret="sessions-wildcard")


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
    assert rule["host"] == "s42.sessions.lab.example"  # an origin of its own
    assert ing["spec"]["tls"] == [{"hosts": ["s42.sessions.lab.example"], "secretName": "sessions-wildcard"}]
    assert rule["http"]["paths"] == [{"path": "/s/42/", "pathType": "Prefix", "backend": {
        "service": {"name": "job-42-a1", "port": {"name": "http"}}}}]
    notes = ing["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/auth-url"] == (
        "http://portal-web.gpu-portal.svc:8000/sessions/42/auth?mode=nginx")
    assert notes["nginx.ingress.kubernetes.io/auth-signin"] == "https://gpu.lab.example/jobs/42/"
    snippet = notes["nginx.ingress.kubernetes.io/configuration-snippet"]
    assert 'proxy_set_header Authorization "";' in snippet and "proxy_set_header Cookie $portal_app_cookie;" in snippet
    assert kube_fake.route_problems(NS) == []


def test_each_route_has_its_own_host_and_the_snippet_strips_the_route_cookie_as_nginx_would(make_podset):
    import re

    from scheduling.backends.kube.routes import STRIP_CREDENTIALS, ingress_manifest

    one = ingress_manifest(session(make_podset), ROUTES)
    other = ingress_manifest(session(make_podset, job_id=43), ROUTES)
    assert one["spec"]["rules"][0]["host"] != other["spec"]["rules"][0]["host"] == "s43.sessions.lab.example"
    # nginx's PCRE and Python's re agree on this pattern: the route's cookie goes, the app's stay
    pattern = re.search(r'~\* "(.+)"\)', STRIP_CREDENTIALS).group(1).replace("\\\\", "\\")
    for sent, app_gets in [("_xsrf=a; __Host-portal_route=t; theme=d", "_xsrf=a; theme=d"),
                           ("portal_route=t", ""), ("_xsrf=a", None)]:
        m = re.match(pattern, sent, re.IGNORECASE)
        assert (m.group(1) + m.group(2) if m else None) == app_gets, sent


def test_the_routes_portal_paths_go_to_the_portals_service_when_one_is_named(make_podset):
    from dataclasses import replace

    from scheduling.backends.kube.routes import ingress_manifest

    paths = ingress_manifest(session(make_podset), replace(ROUTES, portal_service="gpu-portal"))["spec"]["rules"][0][
        "http"]["paths"]
    assert [(p["path"], p["backend"]["service"]["name"]) for p in paths] == [
        ("/s/42/", "job-42-a1"), ("/s/42/_portal/", "gpu-portal")]
    bare = ingress_manifest(session(make_podset), replace(ROUTES, strip_credentials=False, tls_secret=""))
    assert "tls" not in bare["spec"]
    assert "nginx.ingress.kubernetes.io/configuration-snippet" not in bare["metadata"]["annotations"]


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


@pytest.mark.parametrize("method", ["remove_pods", "delete_pods"])
def test_an_attempt_is_cleared_without_deleting_what_it_never_had(routed, kube_fake, make_podset, gpu_nodes, method):
    from scheduling.backends.base import AttemptObjects

    routed.start(make_podset(gpus_per_pod=1), ("gpu-0",))  # a batch job: one pod, no Service, Ingress or PDB
    seen = len(kube_fake.requests)
    getattr(routed, method)(job_id=42, attempt=1, namespace=NS,
                            objects=AttemptObjects(service=False, route=False, budget=False))
    deletes = [r.path for r in kube_fake.requests[seen:] if r.method == "DELETE"]
    assert deletes == [f"/api/v1/namespaces/{NS}/pods/job-42-a1"]
    assert kube_fake.pod(NS, "job-42-a1") is None or kube_fake.pod(NS, "job-42-a1")["metadata"].get(
        "deletionTimestamp")
