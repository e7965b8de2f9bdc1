"""The prometheus-adapter's own queries (deploy/monitoring/prometheus-adapter.yaml), filled in as the adapter
fills its templates, on a real Prometheus scraping the portal's /metrics as two web replicas report it (each
series with the replica's namespace and pod, as the PodMonitor's scrape attaches them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from engine.types import Policy
from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db

ADAPTER = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "prometheus-adapter.yaml"
NS = "gpu-portal-system"
REPLICAS = ("web-0", "web-1")
EXPORTED = ("portal_pending_jobs", "portal_queue_pending_gpus", "portal_policy_weight", "portal_fair_share_factor",
            "portal_fair_share_use_ratio")


def _rules() -> dict[str, tuple[str, dict]]:
    config = yaml.safe_load(yaml.safe_load(ADAPTER.read_text())["data"]["config.yaml"])
    found = {}
    for kind in ("rules", "externalRules"):
        for rule in config[kind]:
            found[f"{kind}:{rule['name']['as']}"] = (kind, rule)
    return found


def _query(kind: str, rule: dict) -> str:
    """The rule's metricsQuery as the adapter sends it: for pods/* of the portal's namespace (grouped by pod),
    or for an external metric (no selector)."""
    series = rule["name"]["matches"].strip("^$")
    matchers = f'namespace="{NS}",pod=~"{"|".join(REPLICAS)}"' if kind == "rules" else ""
    return (rule["metricsQuery"].replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)
            .replace("<<.GroupBy>>", "pod"))


def _as_replicas(text: str) -> str:
    """The portal's exposition of the series the adapter reads, once per replica with its namespace and pod."""
    out = []
    for line in text.splitlines():
        name = re.match(r"^(\w+)[{ ]", line)
        if not name or name.group(1) not in EXPORTED:
            continue
        for pod in REPLICAS:
            labels = f'namespace="{NS}",pod="{pod}"'
            out.append(line.replace("{", "{" + labels + ",", 1) if "{" in line
                       else line.replace(" ", "{" + labels + "} ", 1))
    return "\n".join(out) + "\n"


def _queued(lab, reason: str, n: int) -> None:
    for i in range(n):
        Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name=f"{reason}-{i}", image="img",
                           command=["x"], gpus_per_pod=1, state=JobState.QUEUED, reason_code=reason)


def test_the_adapters_queries_on_a_real_prometheus(lab, exporter, prometheus, client, go):
    from scheduling.services.cycle import run_cycle

    go(run_cycle)  # stores the departments' fair-share standing
    _queued(lab, "quota_exceeded", 8)
    _queued(lab, "no_capacity", 6)
    with exporter.lock:
        exporter.text = _as_replicas(client.get("/metrics").content.decode())
    prometheus.wait_for(f'portal_pending_jobs{{namespace="{NS}"}}', count=4)
    prometheus.wait_for("portal_fair_share_factor", count=2)
    rules = _rules()

    # The pending jobs are the total over reasons (14), not the largest reason's count (8), on every replica.
    per_pod = prometheus.query(_query(*rules["rules:portal_pending_jobs"]))
    assert {r["metric"]["pod"]: float(r["value"][1]) for r in per_pod} == {"web-0": 14.0, "web-1": 14.0}
    (total,) = prometheus.query(_query(*rules["externalRules:portal_pending_jobs"]))
    assert float(total["value"][1]) == 14.0
    queues = prometheus.query(_query(*rules["rules:portal_queue_pending_gpus"]))
    assert {(r["metric"]["pod"], r["metric"]["queue"]): float(r["value"][1]) for r in queues} == {
        ("web-0", "a100-80gb"): 14.0, ("web-1", "a100-80gb"): 14.0}

    # The policy's weights and each department's fair-share standing, once (not once per replica).
    weights = prometheus.query(_query(*rules["externalRules:portal_policy_weight"]))
    assert {(r["metric"]["urgency"], r["metric"]["user_tier"]): float(r["value"][1]) for r in weights} == {
        k: float(v) for k, v in Policy().weights.items()}
    factors = prometheus.query(_query(*rules["externalRules:portal_fair_share_factor"]))
    assert {r["metric"]["department"] for r in factors} >= {"vision", "nlp"}
    assert all(float(r["value"][1]) > 0 for r in factors)
    ratios = prometheus.query(_query(*rules["rules:portal_fair_share_use_ratio"]))
    assert {(r["metric"]["pod"], r["metric"]["department"]) for r in ratios} >= {("web-0", "vision"),
                                                                                 ("web-1", "vision")}
