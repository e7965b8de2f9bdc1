"""The scheduler's and the ledger's series of ``/metrics``: the cycle's histograms and counters as stored by
the workers (``portal.metrics``), and the queue, GPUs and wallets read from the database at scrape time."""

from __future__ import annotations

from django.db.models import Count, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from portal import metrics
from quotas.models import Flavor, Wallet
from scheduling.models import ACTIVE_STATES, TOTAL_GPUS, Job, JobEvent, JobState, Node
from scheduling.services.policy import current_policy

# How an attempt ends. A preempted attempt counts though its job is queued again, and so does a failed attempt
# that is retried (its timeline says "retried" on the way back to the queue): the rate of each beside the rate
# of successes is what a completion-rate panel is for.
POLICY_FACTORS = ("weight_points", "default_weight", "bid_weight", "fair_share_weight", "size_weight",
                  "priority_band_weight")
RETRIED = "retried"  # the reason of a failed attempt's way back to the queue (scheduling.services.lifecycle)
OUTCOMES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED)


def _queue_weights():
    """The policy in force: the urgency x user-tier weight matrix and the other weights of the score (what an
    admin edits at runtime), read at scrape time, so a dashboard shows a change from the next scrape on."""
    policy, version = current_policy()
    weight = GaugeMetricFamily("portal_policy_weight", "The scoring policy's weight of each urgency and user "
                               "tier (a multiple of weight_points score points).", labels=["urgency", "user_tier"])
    for (urgency, user_tier), value in sorted(policy.weights.items()):
        weight.add_metric([urgency, user_tier], value)
    yield weight
    factors = GaugeMetricFamily("portal_policy_factor_weight", "The scoring policy's other weights, by name.",
                                labels=["name"])
    for name in POLICY_FACTORS:
        factors.add_metric([name], float(getattr(policy, name)))
    yield factors
    yield GaugeMetricFamily("portal_policy_version", "The version of the policy in force (0: built-in defaults).",
                            value=version)


def _completions() -> CounterMetricFamily:
    """Attempts ended, by outcome: the timeline's transitions into each outcome, counted at scrape time. The
    timeline is append-only, so the count never goes down (a counter); every outcome has its series, at 0
    before the first."""
    family = CounterMetricFamily("portal_job_completions", "Job attempts ended, by outcome.", labels=["outcome"])
    counts = dict(JobEvent.objects.filter(kind="transition", to_state__in=OUTCOMES).values_list("to_state")
                  .annotate(n=Count("id")).order_by("to_state"))
    counts[JobState.FAILED] = counts.get(JobState.FAILED, 0) + JobEvent.objects.filter(
        kind="transition", to_state=JobState.QUEUED, reason_code=RETRIED).count()
    for outcome in OUTCOMES:
        family.add_metric([str(outcome)], counts.get(outcome, 0))
    return family


class SchedulerCollector(metrics.ScrapeCollector):
    """The scheduler's and the ledger's series, read from the database when Prometheus scrapes."""

    what = "scheduler metrics"

    def _collect(self):
        stored = metrics.stored_series()

        def one(name: str) -> float:
            return sum(v for _, v in stored.get(name, []))

        for histogram in (metrics.CYCLE_DURATION, metrics.DECIDE_DURATION, metrics.QUEUE_WAIT):
            yield histogram.family(stored)
        last = GaugeMetricFamily(metrics.CYCLE_LAST_RUN, "When the last admission cycle ran (Unix time).")
        if metrics.CYCLE_LAST_RUN in stored:
            last.add_metric([], one(metrics.CYCLE_LAST_RUN))
        yield last
        for name, doc, label in ((metrics.ADMISSIONS, "Jobs admitted.", "tier"),
                                 (metrics.PREEMPTIONS, "Jobs chosen as preemption victims.", "reason")):
            family = CounterMetricFamily(name.removesuffix("_total"), doc, labels=[label])
            for labels, value in stored.get(name, []):
                family.add_metric([labels.get(label, "")], value)
            yield family

        yield _completions()
        yield from _queue_weights()
        for name, doc in ((metrics.FAIR_USE_RATIO, "Each department's use relative to its share of the nominal "
                           "quotas, as the last cycle scored its jobs (1 = its share; capped at 4)."),
                          (metrics.FAIR_FACTOR, "How fast each department's jobs gain score for fair share, as the "
                           "last cycle scored them (1 = normal, under 1 = using more than its share).")):
            family = GaugeMetricFamily(name, doc, labels=["department"])
            for labels, value in stored.get(name, []):
                family.add_metric([labels.get("department", "")], value)
            yield family
        for name, doc in ((metrics.TEAM_FAIR_USE_RATIO, "Each team's use ratio as its jobs were scored: its "
                           "department's combined with the team's inside it (docs/teams.md)."),
                          (metrics.TEAM_FAIR_FACTOR, "How fast each team's jobs gain score: its department's fair "
                           "factor times the team's own.")):
            family = GaugeMetricFamily(name, doc, labels=["department", "team"])
            for labels, value in stored.get(name, []):
                family.add_metric([labels.get("department", ""), labels.get("team", "")], value)
            yield family

        pending = GaugeMetricFamily("portal_pending_jobs", "Queued jobs by reason code.", labels=["reason"])
        for reason, n in (Job.objects.filter(state=JobState.QUEUED).values_list("reason_code")
                          .annotate(n=Count("id")).order_by("reason_code")):
            pending.add_metric([reason or "queued"], n)
        yield pending
        # Every known flavor has both series, at 0 when it has no schedulable GPU or no job holds one: a series
        # that vanishes reads as "no data" in Prometheus, not as zero.
        flavors = sorted(Flavor.objects.values_list("name", flat=True))
        total = GaugeMetricFamily("portal_gpus_total", "Schedulable GPUs by flavor.", labels=["flavor"])
        totals = dict(Node.objects.filter(schedulable=True).values_list("flavor__name").annotate(n=Sum("gpus"))
                      .order_by("flavor__name"))
        for flavor in flavors:
            total.add_metric([flavor], totals.get(flavor) or 0)
        yield total
        used = GaugeMetricFamily("portal_gpus_used", "GPUs held by admitted/running portal jobs by flavor.",
                                 labels=["flavor"])
        held = dict(Job.objects.filter(state__in=[s for s in ACTIVE_STATES if s != JobState.QUEUED])
                    .values_list("flavor__name").annotate(n=Sum(TOTAL_GPUS)).order_by("flavor__name"))
        for flavor in flavors:
            used.add_metric([flavor], held.get(flavor) or 0)
        yield used

        drifting = GaugeMetricFamily(metrics.LEDGER_DRIFTING, "Wallets whose balance != sum(ledger entries), as of the "
                                     "last quotas.check_ledger run.")
        if metrics.LEDGER_DRIFTING in stored:
            drifting.add_metric([], one(metrics.LEDGER_DRIFTING))
        yield drifting
        drift = GaugeMetricFamily(metrics.LEDGER_DRIFT, "Wallet value minus the sum of its ledger entries (must be 0).",
                                  labels=["department", "column"])
        for labels, value in stored.get(metrics.LEDGER_DRIFT, []):
            drift.add_metric([labels.get("department", ""), labels.get("column", "")], value)
        yield drift
        available = GaugeMetricFamily("portal_wallet_available_mcr", "Available credits (balance - held).",
                                      labels=["department"])
        for slug, balance, held in Wallet.objects.values_list("department__slug", "balance", "held").order_by(
                "department__slug"):
            available.add_metric([slug], balance - held)
        yield available
