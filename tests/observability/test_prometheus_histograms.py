"""The portal's queue-wait histogram through a real Prometheus: it scrapes the portal's own /metrics, and the
shipped alert's ``histogram_quantile`` expression, evaluated by Prometheus's HTTP API, gives the p95 of the
waits observed in the window."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from portal import metrics

pytestmark = pytest.mark.django_db

RULES = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "rules" / "portal-alerts.yml"
REALTIME_VISION = {"tier": "realtime", "department": "vision", "flavor": "a100-80gb"}
REALTIME_NLP = {**REALTIME_VISION, "department": "nlp"}
P95 = ("histogram_quantile(0.95, sum by (le, tier, department) (max without (instance, pod) "
       "(rate(portal_queue_wait_seconds_bucket[1h]))))")


def _alert_expr(name: str) -> str:
    doc = yaml.safe_load(RULES.read_text())
    return next(r["expr"] for g in doc["groups"] for r in g["rules"] if r.get("alert") == name)


def _serve(exporter, client) -> None:
    with exporter.lock:
        exporter.text = client.get("/metrics").content.decode()


def _by_department(result: list) -> dict[str, float]:
    return {r["metric"]["department"]: float(r["value"][1]) for r in result}


def test_the_queue_wait_alert_computes_p95_from_the_portals_exposition(exporter, prometheus, client):
    # Before the window's waits: 100 quick admissions each, so every bucket's series exists from the first
    # scrape on (a series born inside the window would be extrapolated differently from its neighbours).
    metrics.observe(metrics.QUEUE_WAIT, [(REALTIME_VISION, 5.0), (REALTIME_NLP, 5.0)] * 100)
    _serve(exporter, client)
    prometheus.wait_for("count_over_time(portal_queue_wait_seconds_count[1h]) >= 3", count=2)

    # Then, vision: 13 waits within a minute and 7 in (5 min, 10 min]: p95 = 300 + 300 * 6/7 = 557 s, over
    # the realtime SLO. nlp: 20 waits of 20 s: p95 = 10 + 20 * 19/20 = 29 s.
    metrics.observe(metrics.QUEUE_WAIT, [(REALTIME_VISION, 45.0)] * 13 + [(REALTIME_VISION, 420.0)] * 7
                    + [(REALTIME_NLP, 20.0)] * 20)
    _serve(exporter, client)
    prometheus.wait_for('portal_queue_wait_seconds_count{department="vision"} == 120')
    prometheus.wait_for('portal_queue_wait_seconds_count{department="nlp"} == 120')

    p95 = _by_department(prometheus.query(P95))
    assert p95["vision"] == pytest.approx(300 + 300 * 6 / 7, abs=0.01)
    assert p95["nlp"] == pytest.approx(29, abs=0.01)
    firing = prometheus.query(_alert_expr("PortalQueueWaitP95OverSLO"))
    assert [(r["metric"]["tier"], r["metric"]["department"]) for r in firing] == [("realtime", "vision")]
    # Over all time (no rate), Prometheus reads the same cumulative buckets and count the portal stored.
    total = prometheus.query('sum by (le) (portal_queue_wait_seconds_bucket{department="vision"})')
    assert {r["metric"]["le"]: float(r["value"][1]) for r in total} == {
        le: 100.0 + (13 if float(le) >= 60 else 0) + (7 if float(le) >= 600 else 0) for le in metrics.QUEUE_WAIT.les}
