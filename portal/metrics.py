"""One ``/metrics`` for every process.

Two sources, merged at scrape time:

* **Per-process series** (django-prometheus's request and database metrics). Under gunicorn every worker
  counts on its own, so with ``PROMETHEUS_MULTIPROC_DIR`` set (the image and deploy/ set it for the web
  process, ``portal/gunicorn_conf.py`` clears it at start and marks dead workers) prometheus_client's
  multiprocess mode sums all workers: a counter no longer jumps with whichever worker answered the scrape.
* **The scheduler's and the ledger's series**, observed in Celery workers that nothing scrapes. They are
  written to the database (``MetricValue``: counters only ever grow) or read from it at scrape time
  (pending jobs, GPUs, wallets), by ``DatabaseCollector``.
"""

from __future__ import annotations

import logging
import os

from django.db import transaction
from django.db.models import Count, F, Sum
from django.http import HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

log = logging.getLogger(__name__)

CYCLES = "portal_cycles_total"
CYCLE_SECONDS_SUM = "portal_cycle_duration_seconds_sum"
DECIDE_SECONDS_SUM = "portal_cycle_decide_seconds_sum"
CYCLE_LAST_RUN = "portal_cycle_last_run_timestamp_seconds"
ADMISSIONS = "portal_admissions_total"
PREEMPTIONS = "portal_preemption_victims_total"
LEDGER_DRIFTING = "portal_ledger_drifting_wallets"
LEDGER_DRIFT = "portal_ledger_drift_mcr"


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _parse(labels: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in labels.split(",") if part)


def add(name: str, amount: float, **labels: str) -> None:
    """Grow the counter ``name`` by ``amount``."""
    _upsert([(name, _labels(labels), float(amount))], grow=True)


def _upsert(rows: list[tuple[str, str, float]], *, grow: bool) -> None:
    """One INSERT ... ON CONFLICT for all ``rows`` (PostgreSQL and SQLite alike): a counter grows by its
    amount, a gauge takes its value, in a constant number of statements however many series change."""
    if not rows:
        return
    from django.db import connection
    from django.utils import timezone

    from portal.models import MetricValue

    table = connection.ops.quote_name(MetricValue._meta.db_table)
    value = f"{table}.value + EXCLUDED.value" if grow else "EXCLUDED.value"
    now = timezone.now()
    # Only identifiers from the model and placeholders are formatted in; every value is a parameter.
    sql = (f"INSERT INTO {table} (name, labels, value, updated_at) VALUES "  # noqa: S608
           + ", ".join(["(%s, %s, %s, %s)"] * len(rows))
           + f" ON CONFLICT (name, labels) DO UPDATE SET value = {value}, updated_at = EXCLUDED.updated_at")
    with connection.cursor() as cur:
        cur.execute(sql, [x for name, labels, amount in rows for x in (name, labels, amount, now)])


def set_gauges(name: str, values: dict[str, float] | float, *, label: str | None = None) -> None:
    """Replace the gauge ``name``: one value, or one per value of ``label`` (other label values vanish)."""
    from portal.models import MetricValue

    rows = {"": float(values)} if label is None else {_labels({label: k}): float(v) for k, v in values.items()}
    with transaction.atomic():
        MetricValue.objects.filter(name=name).exclude(labels__in=list(rows)).delete()
        for key, value in rows.items():
            MetricValue.objects.update_or_create(name=name, labels=key, defaults={"value": value})


def set_drift(values: dict[str, float]) -> None:
    """``portal_ledger_drift_mcr{department, column}`` from {"<department>|<column>": mcr}."""
    from portal.models import MetricValue

    rows = {_labels({"department": k.split("|")[0], "column": k.split("|")[1]}): v for k, v in values.items()}
    with transaction.atomic():
        MetricValue.objects.filter(name=LEDGER_DRIFT).exclude(labels__in=list(rows)).delete()
        for key, value in rows.items():
            MetricValue.objects.update_or_create(name=LEDGER_DRIFT, labels=key, defaults={"value": value})


def observe_cycle(outcome, *, snapshot, result, at: float) -> None:
    """Record one admission cycle (called by the cycle, in whatever process runs it): two statements."""
    tier_of = {j.id: j.tier for j in snapshot.pending}
    admitted: dict[str, int] = {}
    for adm in result.admissions:
        tier = tier_of.get(adm.job_id, "unknown")
        admitted[tier] = admitted.get(tier, 0) + 1
    victims: dict[str, int] = {}
    for pre in result.preemptions:
        victims[pre.reason] = victims.get(pre.reason, 0) + len(pre.victim_ids)
    _upsert([(CYCLES, "", 1.0), (CYCLE_SECONDS_SUM, "", outcome.total_ms / 1000),
             (DECIDE_SECONDS_SUM, "", outcome.decide_ms / 1000)]
            + [(ADMISSIONS, _labels({"tier": t}), float(n)) for t, n in sorted(admitted.items())]
            + [(PREEMPTIONS, _labels({"reason": r}), float(n)) for r, n in sorted(victims.items())], grow=True)
    _upsert([(CYCLE_LAST_RUN, "", at)], grow=False)


class DatabaseCollector:
    """The scheduler's and the ledger's series, read from the database when Prometheus scrapes. A database
    that does not answer leaves these series out of that scrape (and is logged); the rest still answers."""

    def describe(self):
        return []  # without it, registering would run collect() (and query) while the apps load

    def collect(self):
        try:
            yield from self._collect()
        except Exception:  # noqa: BLE001 - a scrape must not fail because of one source
            log.warning("scheduler metrics unavailable for this scrape", exc_info=True)

    def _collect(self):
        from portal.models import MetricValue
        from quotas.models import Wallet
        from scheduling.models import ACTIVE_STATES, Job, JobState, Node

        stored: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name, labels, value in MetricValue.objects.values_list("name", "labels", "value"):
            stored.setdefault(name, []).append((_parse(labels), value))

        def one(name: str) -> float:
            return sum(v for _, v in stored.get(name, []))

        cycles = one(CYCLES)
        yield SummaryMetricFamily("portal_cycle_duration_seconds",
                                  "Admission cycle wall time (snapshot + decide + apply).",
                                  count_value=cycles, sum_value=one(CYCLE_SECONDS_SUM))
        yield SummaryMetricFamily("portal_cycle_decide_seconds", "Time the pure engine took to decide a cycle.",
                                  count_value=cycles, sum_value=one(DECIDE_SECONDS_SUM))
        last = GaugeMetricFamily(CYCLE_LAST_RUN, "When the last admission cycle ran (Unix time).")
        if CYCLE_LAST_RUN in stored:
            last.add_metric([], one(CYCLE_LAST_RUN))
        yield last
        for name, doc, label in ((ADMISSIONS, "Jobs admitted.", "tier"),
                                 (PREEMPTIONS, "Jobs chosen as preemption victims.", "reason")):
            family = CounterMetricFamily(name.removesuffix("_total"), doc, labels=[label])
            for labels, value in stored.get(name, []):
                family.add_metric([labels.get(label, "")], value)
            yield family

        pending = GaugeMetricFamily("portal_pending_jobs", "Queued jobs by reason code.", labels=["reason"])
        for reason, n in (Job.objects.filter(state=JobState.QUEUED).values_list("reason_code")
                          .annotate(n=Count("id")).order_by("reason_code")):
            pending.add_metric([reason or "queued"], n)
        yield pending
        total = GaugeMetricFamily("portal_gpus_total", "Schedulable GPUs by flavor.", labels=["flavor"])
        for flavor, n in (Node.objects.filter(schedulable=True).values_list("flavor__name")
                          .annotate(n=Sum("gpus")).order_by("flavor__name")):
            total.add_metric([flavor], n or 0)
        yield total
        used = GaugeMetricFamily("portal_gpus_used", "GPUs held by admitted/running portal jobs by flavor.",
                                 labels=["flavor"])
        for flavor, n in (Job.objects.filter(state__in=[s for s in ACTIVE_STATES if s != JobState.QUEUED])
                          .values_list("flavor__name").annotate(n=Sum(F("gpus") * F("pods")))
                          .order_by("flavor__name")):
            used.add_metric([flavor], n or 0)
        yield used

        drifting = GaugeMetricFamily(LEDGER_DRIFTING, "Wallets whose balance != sum(ledger entries), as of the "
                                     "last quotas.check_ledger run.")
        if LEDGER_DRIFTING in stored:
            drifting.add_metric([], one(LEDGER_DRIFTING))
        yield drifting
        drift = GaugeMetricFamily(LEDGER_DRIFT, "Wallet value minus the sum of its ledger entries (must be 0).",
                                  labels=["department", "column"])
        for labels, value in stored.get(LEDGER_DRIFT, []):
            drift.add_metric([labels.get("department", ""), labels.get("column", "")], value)
        yield drift
        available = GaugeMetricFamily("portal_wallet_available_mcr", "Available credits (balance - held).",
                                      labels=["department"])
        for slug, balance, held in Wallet.objects.values_list("department__slug", "balance", "held").order_by(
                "department__slug"):
            available.add_metric([slug], balance - held)
        yield available


# Collectors of other apps (registered from their AppConfig.ready), served beside DatabaseCollector.
_EXTRA_COLLECTORS: list = []


def register_collector(collector) -> None:
    """Serve ``collector`` (one with ``describe()`` returning [] and ``collect()``) in /metrics of every process."""
    if any(type(c) is type(collector) for c in _EXTRA_COLLECTORS):
        return
    _EXTRA_COLLECTORS.append(collector)
    REGISTRY.register(collector)


def stored(name: str) -> list[tuple[dict[str, str], float]]:
    """The stored values of one series (counters and gauges kept in ``MetricValue``), with their labels."""
    from portal.models import MetricValue

    return [(_parse(labels), value) for labels, value in
            MetricValue.objects.filter(name=name).values_list("labels", "value")]


def _registry():
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(DatabaseCollector())
        for collector in _EXTRA_COLLECTORS:
            registry.register(collector)
        return registry
    return REGISTRY  # DatabaseCollector is registered in it by PortalConfig.ready


def metrics_view(request):
    """``/metrics``: every series of every process (see the module docstring)."""
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
