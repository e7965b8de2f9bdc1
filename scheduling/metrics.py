"""Prometheus metrics of the scheduler (exported at /metrics with django-prometheus's)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CYCLE_SECONDS = Histogram(
    "portal_cycle_duration_seconds", "Admission cycle wall time (snapshot + decide + apply).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DECIDE_SECONDS = Histogram(
    "portal_cycle_decide_seconds", "Time the pure engine took to decide one cycle.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
ADMISSIONS = Counter("portal_admissions_total", "Jobs admitted.", ["tier"])
PREEMPTIONS = Counter("portal_preemption_victims_total", "Jobs chosen as preemption victims.", ["reason"])
PENDING = Gauge("portal_pending_jobs", "Queued jobs by reason code.", ["reason"])
GPUS_TOTAL = Gauge("portal_gpus_total", "Schedulable GPUs by flavor.", ["flavor"])
GPUS_USED = Gauge("portal_gpus_used", "GPUs held by admitted/running portal jobs by flavor.", ["flavor"])


def observe_cycle(outcome, *, snapshot, result) -> None:
    CYCLE_SECONDS.observe(outcome.total_ms / 1000)
    DECIDE_SECONDS.observe(outcome.decide_ms / 1000)
    tier_of = {j.id: j.tier for j in snapshot.pending}
    for adm in result.admissions:
        ADMISSIONS.labels(tier=tier_of.get(adm.job_id, "unknown")).inc()
    for pre in result.preemptions:
        PREEMPTIONS.labels(reason=pre.reason).inc(len(pre.victim_ids))
    counts: dict[str, int] = {}
    for pr in result.pending:
        counts[pr.code] = counts.get(pr.code, 0) + 1
    PENDING.clear()
    for code, n in counts.items():
        PENDING.labels(reason=code).set(n)
    totals: dict[str, int] = {}
    for n in snapshot.nodes:
        if n.usable:
            totals[n.flavor] = totals.get(n.flavor, 0) + n.gpus
    used: dict[str, int] = {}
    for r in snapshot.running:
        used[r.flavor] = used.get(r.flavor, 0) + r.gpus
    for flavor, total in totals.items():
        GPUS_TOTAL.labels(flavor=flavor).set(total)
        GPUS_USED.labels(flavor=flavor).set(used.get(flavor, 0))
