"""Every long-running process is supervised: a restart policy and a liveness check in docker-compose.yml and
in deploy/, and the checks themselves work (probes answer whatever the Host header, heartbeats go stale)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_every_compose_service_restarts_and_has_a_health_check():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    anchor = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["x-portal"]
    long_running = {n: s for n, s in services.items() if n != "migrate"}  # a one-shot job
    assert {"web", "worker", "beat", "postgres", "redis"} <= set(long_running)
    for name, svc in long_running.items():
        assert (svc.get("restart") or anchor.get("restart")) == "unless-stopped", name
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"


def test_every_deployment_restarts_and_has_a_liveness_probe():
    deployments = [d for p in sorted((ROOT / "deploy").rglob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
                   if d and d.get("kind") == "Deployment"]
    names = {d["metadata"]["name"] for d in deployments}
    assert {"gpu-portal-web", "gpu-portal-worker", "gpu-portal-beat", "gpu-portal-watcher"} <= names
    for d in deployments:
        spec = d["spec"]["template"]["spec"]
        assert spec.get("restartPolicy", "Always") == "Always"
        for c in spec["containers"]:
            assert c.get("livenessProbe"), f"{d['metadata']['name']}/{c['name']} has no liveness probe"
    web = next(d for d in deployments if d["metadata"]["name"] == "gpu-portal-web")
    [container] = web["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # a stalled scheduler must not take every web replica out of the Service (tests/portal/test_scheduler_stall.py)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz?exclude=scheduler"


@pytest.mark.django_db
def test_probes_answer_a_kubelet_that_sends_the_pod_address_as_host(client):
    assert client.get("/healthz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    assert client.get("/readyz", HTTP_HOST="10.1.2.3:8000").json()["checks"]["database"] == "ok"
    assert client.get("/api/v1/me", HTTP_HOST="10.1.2.3:8000").status_code == 400  # elsewhere: refused


def test_a_heartbeat_file_goes_stale(tmp_path):
    from portal import heartbeat

    path = str(tmp_path / "celerybeat-schedule")
    assert heartbeat.main([path, "60"]) == 1  # missing
    heartbeat.touch(path + ".db")  # shelve's suffix
    assert heartbeat.main([path, "60"]) == 0
    old = time.time() - 300
    os.utime(path + ".db", (old, old))
    assert heartbeat.main([path, "60"]) == 1
