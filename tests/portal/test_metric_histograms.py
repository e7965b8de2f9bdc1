"""Histograms kept in the database: cumulative buckets, sum and count that only grow, one statement per batch
whatever its size, no increment lost between concurrent writers, and a /metrics that a Prometheus parser reads
as histograms. The cycle observes each admitted job's queue wait (from when it was last queued) and its own
latency into them."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal import metrics
from portal.models import MetricValue
from scheduling.models import Job
from scheduling.services.cycle import run_cycle
from tests.scheduling.test_postgres import _in_thread

pytestmark = pytest.mark.django_db

VISION = {"tier": "realtime", "department": "vision", "flavor": "a100-80gb"}
NLP = {"tier": "elastic", "department": "nlp", "flavor": "a100-80gb"}


def _buckets(histogram: metrics.Histogram, labels: dict[str, str]) -> dict[str, float]:
    return {row["le"]: value for row, value in metrics.stored(f"{histogram.name}_bucket")
            if {k: row[k] for k in labels} == labels}


def _sum(histogram: metrics.Histogram, labels: dict[str, str]) -> float:
    return next(v for row, v in metrics.stored(f"{histogram.name}_sum") if row == labels)


def test_buckets_are_cumulative_and_a_bound_holds_the_value_equal_to_it():
    metrics.observe(metrics.QUEUE_WAIT, [(VISION, 5), (VISION, 10), (VISION, 45), (VISION, 400),
                                         (VISION, 10 ** 6)])
    got = _buckets(metrics.QUEUE_WAIT, VISION)
    assert set(got) == set(metrics.QUEUE_WAIT.les) and len(got) == 15  # one row per bound, none missing
    assert (got["10.0"], got["30.0"], got["60.0"], got["300.0"], got["600.0"]) == (2, 2, 3, 3, 4)
    assert got["172800.0"] == 4 and got["+Inf"] == 5  # a million seconds is only under +Inf
    assert _sum(metrics.QUEUE_WAIT, VISION) == 5 + 10 + 45 + 400 + 10 ** 6


def test_observations_only_add_up_and_label_sets_stay_apart():
    metrics.observe(metrics.QUEUE_WAIT, [(VISION, 20)])
    metrics.observe(metrics.QUEUE_WAIT, [(VISION, 20), (NLP, 7200)])
    assert _buckets(metrics.QUEUE_WAIT, VISION)["30.0"] == 2 and _sum(metrics.QUEUE_WAIT, VISION) == 40
    nlp = _buckets(metrics.QUEUE_WAIT, NLP)
    assert (nlp["3600.0"], nlp["7200.0"], nlp["+Inf"]) == (0, 1, 1)


def test_a_batch_is_one_statement_however_many_values_and_series(django_assert_num_queries):
    batch = [({**VISION, "tier": tier}, float(i)) for i in range(200) for tier in ("realtime", "elastic")]
    with django_assert_num_queries(1):
        metrics.observe(metrics.QUEUE_WAIT, batch)
    with django_assert_num_queries(0):
        metrics.observe(metrics.QUEUE_WAIT, [])
    assert MetricValue.objects.filter(name="portal_queue_wait_seconds_bucket").count() == 2 * 15


def test_wrong_labels_and_unordered_bounds_are_refused():
    with pytest.raises(ValueError, match="takes labels"):
        metrics.observe(metrics.QUEUE_WAIT, [({"tier": "realtime"}, 1)])
    with pytest.raises(ValueError, match="takes labels"):
        metrics.observe(metrics.QUEUE_WAIT, [({**VISION, "user": "alice"}, 1)])
    with pytest.raises(ValueError, match="ascend"):
        metrics.Histogram("x_seconds", "x", labels=(), bounds=(10, 5))
    with pytest.raises(ValueError, match="ascend"):
        metrics.Histogram("x_seconds", "x", labels=(), bounds=(5, 5))
    assert not MetricValue.objects.exists()


def _families(client) -> dict:
    return {f.name: f for f in text_string_to_metric_families(client.get("/metrics").content.decode())}


def test_metrics_parse_as_histograms_with_count_equal_to_the_inf_bucket(client):
    families = _families(client)
    cycle = families["portal_cycle_duration_seconds"]  # before any cycle: one series of zeros, as clients do
    assert cycle.type == "histogram"
    assert {s.name: s.value for s in cycle.samples if s.name != "portal_cycle_duration_seconds_bucket"} == {
        "portal_cycle_duration_seconds_count": 0, "portal_cycle_duration_seconds_sum": 0}
    assert not families["portal_queue_wait_seconds"].samples  # no admission yet: no label set invented

    metrics.observe(metrics.QUEUE_WAIT, [(VISION, 20), (VISION, 900), (NLP, 30)])
    wait = _families(client)["portal_queue_wait_seconds"]
    assert wait.type == "histogram"
    vision = [s for s in wait.samples if s.labels.get("department") == "vision"]
    buckets = [(s.labels["le"], s.value) for s in vision if s.name.endswith("_bucket")]
    assert [le for le, _ in buckets] == list(metrics.QUEUE_WAIT.les)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    values = {s.name: s.value for s in vision if not s.name.endswith("_bucket")}
    assert values == {"portal_queue_wait_seconds_count": 2, "portal_queue_wait_seconds_sum": 920}
    assert vision[0].labels == {**VISION, "le": "10.0"}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_observers_lose_no_increment():
    threads, rounds = 8, 25

    def observer(i: int) -> None:
        for r in range(rounds):
            # Each batch touches the same rows as every other thread's, in a different label order.
            batch = [(VISION, float(i + r)), (NLP, 100.0)] if i % 2 else [(NLP, 100.0), (VISION, float(i + r))]
            metrics.observe(metrics.QUEUE_WAIT, batch)

    _, errors = _in_thread(observer, threads)
    assert not errors
    assert _buckets(metrics.QUEUE_WAIT, VISION)["+Inf"] == threads * rounds
    assert _buckets(metrics.QUEUE_WAIT, NLP)["120.0"] == threads * rounds
    assert _sum(metrics.QUEUE_WAIT, VISION) == sum(i + r for i in range(threads) for r in range(rounds))
    assert _sum(metrics.QUEUE_WAIT, NLP) == 100.0 * threads * rounds


def test_the_cycle_observes_each_admitted_jobs_wait_since_it_was_last_queued(lab, submit, go):
    now = timezone.now()
    fresh = go(submit, lab.alice, name="fresh")
    requeued = go(submit, lab.bob, name="requeued")
    Job.objects.filter(pk=fresh.pk).update(submitted_at=now - timedelta(seconds=400),
                                           queued_at=now - timedelta(seconds=400))
    # submitted two days ago, its earlier attempt preempted, queued again 100 s ago: it has waited 100 s
    Job.objects.filter(pk=requeued.pk).update(submitted_at=now - timedelta(days=2),
                                              queued_at=now - timedelta(seconds=100))
    assert go(run_cycle, now=now).admitted == 2
    vision = {"tier": "elastic", "department": "vision", "flavor": "a100-80gb"}
    nlp = {**vision, "department": "nlp"}
    assert {le: n for le, n in _buckets(metrics.QUEUE_WAIT, vision).items() if le in ("300.0", "600.0")} == {
        "300.0": 0, "600.0": 1}
    assert _sum(metrics.QUEUE_WAIT, vision) == pytest.approx(400)
    assert (_buckets(metrics.QUEUE_WAIT, nlp)["60.0"], _buckets(metrics.QUEUE_WAIT, nlp)["120.0"]) == (0, 1)
    assert _sum(metrics.QUEUE_WAIT, nlp) == pytest.approx(100)
    # The admissions counter counts the same admissions, and the cycle's own latency is a histogram too.
    assert metrics.stored(metrics.ADMISSIONS) == [({"tier": "elastic"}, 2.0)]
    assert _buckets(metrics.CYCLE_DURATION, {})["+Inf"] == 1 and _buckets(metrics.DECIDE_DURATION, {})["+Inf"] == 1
    assert _sum(metrics.CYCLE_DURATION, {}) >= _sum(metrics.DECIDE_DURATION, {}) > 0


def test_a_cycle_that_admits_nothing_observes_no_wait(lab, submit, go):
    huge = go(submit, lab.alice, name="huge", gpus=4, pods=2)
    type(huge).objects.filter(pk=huge.pk).update(pods=3)  # cannot fit anywhere (grown after submission)
    assert go(run_cycle).admitted == 0
    assert not metrics.stored("portal_queue_wait_seconds_bucket") and not metrics.stored(metrics.ADMISSIONS)
    assert _buckets(metrics.CYCLE_DURATION, {})["+Inf"] == 1


def test_the_upgrade_carries_the_cycle_count_over_to_the_histograms(client):
    migration = importlib.import_module("portal.migrations.0005_cycle_histograms")
    MetricValue.objects.create(name="portal_cycles_total", value=42)
    MetricValue.objects.create(name="portal_cycle_duration_seconds_sum", value=8.5)
    migration.carry_over(apps, None)
    assert not MetricValue.objects.filter(name="portal_cycles_total").exists()
    assert _buckets(metrics.CYCLE_DURATION, {}) == {"+Inf": 42} == _buckets(metrics.DECIDE_DURATION, {})
    text = client.get("/metrics").content.decode()
    assert "portal_cycle_duration_seconds_count 42.0" in text and "portal_cycle_duration_seconds_sum 8.5" in text
    migration.carry_back(apps, None)
    assert metrics.stored("portal_cycles_total") == [({}, 42.0)]
    assert not metrics.stored("portal_cycle_duration_seconds_bucket")
