"""One ``/metrics`` for every process.

Two sources, merged at scrape time:

* **Per-process series** (django-prometheus's request and database metrics). Under gunicorn every worker
  counts on its own, so with ``PROMETHEUS_MULTIPROC_DIR`` set (the image and deploy/ set it for the web
  process, ``portal/gunicorn_conf.py`` clears it at start and marks dead workers) prometheus_client's
  multiprocess mode sums all workers: a counter no longer jumps with whichever worker answered the scrape.
* **The scheduler's and the ledger's series**, observed in Celery workers that nothing scrapes. They are
  written to the database (``MetricValue``: counters and histograms only ever grow) or read from it at
  scrape time (pending jobs, GPUs, wallets) by the collectors the apps register (``register_collector``).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from portal.models import MetricValue

log = logging.getLogger(__name__)

CYCLE_LAST_RUN = "portal_cycle_last_run_timestamp_seconds"
ADMISSIONS = "portal_admissions_total"
PREEMPTIONS = "portal_preemption_victims_total"
LEDGER_DRIFTING = "portal_ledger_drifting_wallets"
LEDGER_DRIFT = "portal_ledger_drift_mcr"
FAIR_USE_RATIO = "portal_fair_share_use_ratio"
FAIR_FACTOR = "portal_fair_share_factor"
# The same, of each team's account inside its department (``engine.teams``): labels department and team
# (bounded: teams are made by department admins, a handful per department). Series of their own, so that the
# departments' series (and what is computed from them) stay the departments' alone.
TEAM_FAIR_USE_RATIO = "portal_team_fair_share_use_ratio"
TEAM_FAIR_FACTOR = "portal_team_fair_share_factor"


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _parse(labels: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in labels.split(",") if part)


def add(name: str, amount: float, **labels: str) -> None:
    """Grow the counter ``name`` by ``amount``."""
    _upsert([(name, _labels(labels), float(amount))], grow=True)


def _upsert(rows: list[tuple[str, str, float]], *, grow: bool) -> None:
    """One INSERT ... ON CONFLICT for all ``rows`` (PostgreSQL and SQLite alike): a counter grows by its
    amount, a gauge takes its value, in a constant number of statements however many series change. Each
    (name, labels) may appear once (an upsert cannot touch a row twice)."""
    if not rows:
        return
    # Rows are locked in one order whoever writes them, so two writers sharing series cannot deadlock.
    rows = sorted(rows)
    table = connection.ops.quote_name(MetricValue._meta.db_table)
    value = f"{table}.value + EXCLUDED.value" if grow else "EXCLUDED.value"
    now = timezone.now()
    # Only identifiers from the model and placeholders are formatted in; every value is a parameter.
    sql = (f"INSERT INTO {table} (name, labels, value, updated_at) VALUES "  # noqa: S608
           + ", ".join(["(%s, %s, %s, %s)"] * len(rows))
           + f" ON CONFLICT (name, labels) DO UPDATE SET value = {value}, updated_at = EXCLUDED.updated_at")
    with connection.cursor() as cur:
        cur.execute(sql, [x for name, labels, amount in rows for x in (name, labels, amount, now)])


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram kept in ``MetricValue``, so every process's observations add up in one place.

    Stored as counters that only grow: ``<name>_bucket`` per label set and bound (the bound in the ``le``
    label, ``+Inf`` included), cumulative as Prometheus defines it (a value adds 1 to every bucket whose
    bound is >= it), and ``<name>_sum``. The count is the ``+Inf`` bucket, so the two can never disagree.
    The bounds are part of the stored series: changing them needs a new name (a bound added later would
    start at 0 under buckets that already counted)."""

    name: str
    doc: str
    labels: tuple[str, ...]
    bounds: tuple[float, ...]  # finite upper bounds, ascending; +Inf is implied

    def __post_init__(self):
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"{self.name}: bucket bounds must ascend without repeats")

    @property
    def les(self) -> tuple[str, ...]:
        """The ``le`` label values, spelled as the Prometheus clients spell them ("10.0", "+Inf")."""
        return (*(floatToGoString(b) for b in self.bounds), "+Inf")

    def rows(self, observations: Iterable[tuple[Mapping[str, str], float]]) -> list[tuple[str, str, float]]:
        """What ``observations`` ((labels, value) pairs) add to each stored row, one row per series, for
        ``_upsert(grow=True)``: the whole batch in one statement, however many values."""
        grow: Counter[tuple[str, str]] = Counter()
        for labels, value in observations:
            if set(labels) != set(self.labels):
                raise ValueError(f"{self.name} takes labels {sorted(self.labels)}, not {sorted(labels)}")
            for bound, le in zip((*self.bounds, float("inf")), self.les, strict=True):
                # Every bucket of the label set gets a row (+0 above the value): the stored series are whole.
                grow[(f"{self.name}_bucket", _labels({**labels, "le": le}))] += value <= bound
            grow[(f"{self.name}_sum", _labels(dict(labels)))] += value
        return [(name, labels, float(amount)) for (name, labels), amount in grow.items()]

    def family(self, stored: Mapping[str, list[tuple[dict[str, str], float]]]) -> HistogramMetricFamily:
        """The exported family, from the stored rows (all read by one query, so buckets and sum agree)."""
        family = HistogramMetricFamily(self.name, self.doc, labels=list(self.labels))
        buckets: dict[tuple[str, ...], dict[str, float]] = {}
        for labels, value in stored.get(f"{self.name}_bucket", []):
            buckets.setdefault(tuple(labels.get(k, "") for k in self.labels), {})[labels.get("le", "")] = value
        if not self.labels:
            buckets.setdefault((), {})  # one series, there from the start (zeros), as client libraries do
        sums = {tuple(labels.get(k, "") for k in self.labels): value
                for labels, value in stored.get(f"{self.name}_sum", [])}
        for key in sorted(buckets):
            family.add_metric(list(key), [(le, buckets[key].get(le, 0.0)) for le in self.les], sums.get(key, 0.0))
        return family


def observe(histogram: Histogram, observations: Iterable[tuple[Mapping[str, str], float]]) -> None:
    """Add ``observations`` ((labels, value) pairs) to ``histogram``: one statement for the whole batch."""
    _upsert(histogram.rows(observations), grow=True)


# A queue wait is measured from when the job was last queued (submission, approval or requeue after a lost or
# preempted attempt) to its admission: what a queue-wait SLO promises. Seconds to days, with bounds at the
# alerts' SLOs (5 min realtime, 4 h elastic).
QUEUE_WAIT = Histogram(
    "portal_queue_wait_seconds", "Queue wait of admitted jobs: from when the job was last queued to its admission.",
    labels=("tier", "department", "flavor"),
    bounds=(10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800))
_CYCLE_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
CYCLE_DURATION = Histogram("portal_cycle_duration_seconds",
                           "Admission cycle wall time (snapshot + decide + apply).", labels=(), bounds=_CYCLE_BOUNDS)
DECIDE_DURATION = Histogram("portal_cycle_decide_seconds", "Time the pure engine took to decide a cycle.",
                            labels=(), bounds=_CYCLE_BOUNDS)


def set_gauges(name: str, values: dict[str, float] | float, *, label: str | None = None) -> None:
    """Replace the gauge ``name``: one value, or one per value of ``label`` (other label values vanish)."""
    rows = {"": float(values)} if label is None else {_labels({label: k}): float(v) for k, v in values.items()}
    with transaction.atomic():
        MetricValue.objects.filter(name=name).exclude(labels__in=list(rows)).delete()
        for key, value in rows.items():
            MetricValue.objects.update_or_create(name=name, labels=key, defaults={"value": value})


def set_drift(values: dict[str, float]) -> None:
    """``portal_ledger_drift_mcr{department, column}`` from {"<department>|<column>": mcr}."""
    rows = {_labels({"department": k.split("|")[0], "column": k.split("|")[1]}): v for k, v in values.items()}
    with transaction.atomic():
        MetricValue.objects.filter(name=LEDGER_DRIFT).exclude(labels__in=list(rows)).delete()
        for key, value in rows.items():
            MetricValue.objects.update_or_create(name=LEDGER_DRIFT, labels=key, defaults={"value": value})


def observe_admissions(waits: list[tuple[Mapping[str, str], float]]) -> None:
    """Count the jobs a cycle admitted per tier and add their queue waits to ``QUEUE_WAIT``, from ({tier,
    department, flavor}, seconds) pairs, in one statement. The cycle calls it inside its apply transaction:
    an apply rolled back counts nothing, and ``portal_admissions_total`` always equals the histogram's count."""
    tiers = Counter(labels["tier"] for labels, _ in waits)
    _upsert([(ADMISSIONS, _labels({"tier": t}), float(n)) for t, n in tiers.items()] + QUEUE_WAIT.rows(waits),
            grow=True)


def observe_cycle(outcome, *, result, at: float, fair: Mapping[str, tuple[float, float]] | None = None) -> None:
    """Record one admission cycle (called by the cycle, in whatever process runs it): two statements. ``fair``:
    each department's (use ratio, fair factor) as the cycle scored it (a department that leaves the cohort
    keeps its last values)."""
    victims: dict[str, int] = {}
    for pre in result.preemptions:
        victims[pre.reason] = victims.get(pre.reason, 0) + len(pre.victim_ids)
    _upsert(CYCLE_DURATION.rows([({}, outcome.total_ms / 1000)])
            + DECIDE_DURATION.rows([({}, outcome.decide_ms / 1000)])
            + [(PREEMPTIONS, _labels({"reason": r}), float(n)) for r, n in victims.items()], grow=True)
    standing = []
    for account, pair in sorted((fair or {}).items()):
        department, _, team = account.partition("/")
        names = (TEAM_FAIR_USE_RATIO, TEAM_FAIR_FACTOR) if team else (FAIR_USE_RATIO, FAIR_FACTOR)
        labels = _labels({"department": department, "team": team} if team else {"department": department})
        standing += [(name, labels, float(pair[i])) for i, name in enumerate(names)]
    _upsert([(CYCLE_LAST_RUN, "", at), *standing], grow=False)


@dataclass(frozen=True)
class SchedulerState:
    """When the last admission cycle completed, from its persisted record (``CYCLE_LAST_RUN``, written by
    whichever worker ran it), and whether that is longer ago than ``CYCLE_STALE_AFTER_S``."""

    last_run_at: float | None
    age_s: float | None
    stale_after_s: float

    @property
    def stalled(self) -> bool:
        return self.stale_after_s > 0 and self.age_s is not None and self.age_s > self.stale_after_s

    @property
    def summary(self) -> str:
        if self.age_s is None:
            return "no admission cycle has completed yet"
        return f"last admission cycle {self.age_s:.0f} s ago"


def scheduler_state(*, now: float) -> SchedulerState:
    """One query. A database that never saw a cycle (a fresh install before its first) is not stalled."""
    last = MetricValue.objects.filter(name=CYCLE_LAST_RUN, labels="").values_list("value", flat=True).first()
    return SchedulerState(last_run_at=last, age_s=None if last is None else max(0.0, now - last),
                          stale_after_s=settings.CYCLE_STALE_AFTER_S)


def stored_series() -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every stored series (counters, gauges and histogram rows kept in ``MetricValue``) with its labels, in
    one query: what a collector serves at scrape time."""
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in MetricValue.objects.values_list("name", "labels", "value"):
        series.setdefault(name, []).append((_parse(labels), value))
    return series


# The apps' collectors (registered from their AppConfig.ready): the scheduler's, the ledger's and the GPU-use
# series live with the apps that own those rows.
_EXTRA_COLLECTORS: list = []


class ScrapeCollector:
    """A collector that reads its series when Prometheus scrapes (``_collect()``). A source that fails (a
    database that does not answer) leaves its series out of that scrape and is logged; the rest still answers."""

    what = "metrics"  # named in the log line

    def describe(self):
        return []  # without it, registering would run collect() (and query) while the apps load

    def collect(self):
        try:
            yield from self._collect()
        except Exception:  # noqa: BLE001 - a scrape must not fail because of one source
            log.warning("%s unavailable for this scrape", self.what, exc_info=True)

    def _collect(self):
        raise NotImplementedError


def register_collector(collector) -> None:
    """Serve ``collector`` (one with ``describe()`` returning [] and ``collect()``, e.g. a ``ScrapeCollector``)
    in /metrics of every process."""
    if any(type(c) is type(collector) for c in _EXTRA_COLLECTORS):
        return
    _EXTRA_COLLECTORS.append(collector)
    REGISTRY.register(collector)


def stored(name: str) -> list[tuple[dict[str, str], float]]:
    """The stored values of one series (counters, gauges and histogram rows kept in ``MetricValue``), with
    their labels."""
    return [(_parse(labels), value) for labels, value in
            MetricValue.objects.filter(name=name).values_list("labels", "value")]


def _registry():
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        for collector in _EXTRA_COLLECTORS:
            registry.register(collector)
        return registry
    return REGISTRY  # the apps' collectors are registered in it by register_collector


def metrics_view(request):
    """``/metrics``: every series of every process (see the module docstring)."""
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
