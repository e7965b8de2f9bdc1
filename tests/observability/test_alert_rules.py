"""The Prometheus alert rules in deploy/: valid (promtool check rules), each alert unit-tested (promtool test
rules), and every series they, the adapter and the dashboard read is one the portal really exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prom_world import PROMTOOL, need

RULES = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
SERIES = re.compile(r"\b(portal_[a-z0-9_]+)")


def _alerts() -> list[str]:
    doc = yaml.safe_load((RULES / "rules" / "portal-alerts.yml").read_text())
    return [r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_checks_the_rules():
    run = subprocess.run([need(PROMTOOL, "promtool"), "check", "rules", str(RULES / "rules" / "portal-alerts.yml")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in run.stdout


def test_promtool_unit_tests_every_alert():
    run = subprocess.run([need(PROMTOOL, "promtool"), "test", "rules", "portal-alerts.test.yml"],
                         cwd=RULES / "rules", capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    tests = yaml.safe_load((RULES / "rules" / "portal-alerts.test.yml").read_text())["tests"]
    fired = {t["alertname"] for test in tests for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert fired == set(_alerts())


@pytest.mark.django_db
def test_the_rules_adapter_and_dashboard_read_series_the_portal_exports(lab, client):
    from django.utils import timezone

    from observability.models import AttemptUsage
    from portal import metrics
    from scheduling.models import Job, JobState

    # Make every database-backed family have at least one sample, then read the real /metrics.
    job = Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name="t", image="i",
                             command=["x"], gpus_per_pod=1, state=JobState.RUNNING, started_at=timezone.now())
    AttemptUsage.objects.create(job=job, attempt=1, source="simulated", gpus=1, started_at=timezone.now(),
                                samples=1, mean_util=1, idle_flagged_at=timezone.now())
    metrics.add("portal_gpu_usage_read_failures_total", 1, source="prometheus")
    metrics.observe(metrics.QUEUE_WAIT, [({"tier": "realtime", "department": "vision", "flavor": "a100-80gb"}, 30)])
    exported = set(SERIES.findall(client.get("/metrics").content.decode()))
    text = ((RULES / "rules" / "portal-alerts.yml").read_text() + (RULES / "prometheus-adapter.yaml").read_text()
            + json.dumps(json.loads((RULES / "grafana" / "gpu-portal.json").read_text())))
    used = set(SERIES.findall(text))
    assert used and used <= exported, sorted(used - exported)


def test_the_adapter_exposes_pending_gpus_per_queue():
    manifest = yaml.safe_load((RULES / "prometheus-adapter.yaml").read_text())
    config = yaml.safe_load(manifest["data"]["config.yaml"])
    names = {r["name"]["as"] for r in config["rules"] + config["externalRules"]}
    assert "portal_queue_pending_gpus" in names
    assert all("<<.Series>>" in r["metricsQuery"] for r in config["rules"] + config["externalRules"])
