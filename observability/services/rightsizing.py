"""Predictive right-sizing: what an owner's similar jobs really used, as an EWMA (alpha 0.3) over their finished
attempts, with 20% headroom.

Similar means the same owner (in the same department) and either the same job-name family (``resnet-50-lr3``
and ``resnet-101`` are both ``resnet-*``) or the same image. A family is preferred to an image when it has
history. Each finished attempt first records what the history predicted for it (the error of the
recommendation), then moves the averages.

Headroom: memory and run time get 20% on top of the average (``HEADROOM``). A GPU count does not: GPUs come
whole and a GPU cannot be more than fully busy, so "1.2 x busy GPUs, rounded up" turns a job that holds 2 GPUs
and saturates one (0.9 busy) into "ask for 2" again. The whole-GPU rule is ``whole_gpus``: the fewest GPUs that
hold the busy ones, ``ceil(busy - WHOLE_GPU_TOLERANCE)`` (a measured 1.03 is one saturated GPU plus noise), at
least 1, and never more than the job held (a job cannot show a need for GPUs it did not have; one that keeps
all of them busy is told to keep them).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from engine.fractions import FULL_CORES, HAMI, MILLI, REPLICAS, fraction_of
from observability.models import AttemptUsage, PredictionOutcome, UsageHistory
from observability.services import tensorboard
from quotas import budgets

ALPHA = 0.3
HEADROOM = 1.2
MIN_SAMPLES = 3  # an attempt with fewer samples says nothing about the job
# Busy GPUs above a whole number by at most this much are that number (DCGM's sampling noise, a short spike).
WHOLE_GPU_TOLERANCE = 0.05
_SPLIT = re.compile(r"[-_.]")


@functools.lru_cache(maxsize=1 << 16)  # the cycle asks for every waiting job's, every cycle
def family(name: str) -> str:
    """Leading words of a job name up to the first one with a digit: ``resnet-50-lr3`` -> ``resnet-*``."""
    words = _SPLIT.split(name.strip().lower())
    kept = []
    for w in words:
        if any(c.isdigit() for c in w) or not w:
            break
        kept.append(w)
    if not kept:
        return name.strip().lower()
    return "-".join(kept) + ("-*" if len(kept) < len(words) else "")


def keys_for(*, name: str = "", image: str = "") -> list[str]:
    return list(key_tuple(name, image))


@functools.lru_cache(maxsize=1 << 16)  # the cycle asks for every waiting job's, every cycle
def key_tuple(name: str, image: str) -> tuple[str, ...]:
    """``keys_for`` as a tuple (shared between calls: never changed)."""
    keys = []
    if name.strip():
        keys.append("name:" + family(name))
    if image.strip():
        keys.append("image:" + image.strip())
    return tuple(keys)


def ewma(old: float | None, new: float | None) -> float | None:
    if new is None:
        return old
    return new if old is None else ALPHA * new + (1 - ALPHA) * old


@dataclass(frozen=True)
class Recommendation:
    key: str
    runs: int
    gpus_requested: float
    busy_gpus: float | None
    peak_memory_mib: float | None
    runtime_s: float | None
    gpus: int | None  # what to ask for, headroom included
    memory_gib: float | None
    max_runtime_s: int | None
    memory_source: str = ""  # what measured the last peak folded in (``peak_of``)

    @property
    def label(self) -> str:
        return self.key.split(":", 1)[1]

    @property
    def text(self) -> str:
        parts = []
        if self.busy_gpus is not None:
            parts.append(f"{self.busy_gpus:.1f} of {self.gpus_requested:.0f} GPUs")
        if self.peak_memory_mib is not None:
            parts.append(f"{self.peak_memory_mib / 1024:.0f} GB")
        used = " and ".join(parts) or "no GPU data"
        ask = f"; ask for {self.gpus}" if self.gpus is not None else ""
        runtime = f" (max runtime about {self.max_runtime_s} s)" if self.max_runtime_s else ""
        return f"your last {self.runs} runs of {self.label} used {used}{ask}{runtime}"


# What measured an attempt (``AttemptUsage.source``), as a recommendation names it.
MEASURED_BY = {"prometheus": "dcgm", "hami": "hami", "simulated": "simulated"}


def peak_of(usage: AttemptUsage, *, fraction: bool) -> tuple[float | None, str]:
    """The attempt's peak GPU memory (MiB, of one GPU) and what measured it: the GPU metrics' peak, or the peak
    the job logged to TensorBoard (``tensorboard.py``, read from its checkpoint directory) where that is larger
    (the allocator's own figure: a metric that missed it was sampled too coarsely) or the metric is none of the
    job's own (a ``fraction`` read from DCGM: its GPU's figure, its neighbours' memory included)."""
    metric, by = usage.peak_memory_mib, MEASURED_BY.get(usage.source, usage.source)
    logged = usage.tensorboard_peak_mib
    if logged is not None and (metric is None or logged > metric or (fraction and usage.source == "prometheus")):
        return logged, tensorboard.SOURCE
    return metric, by if metric is not None else ""


def whole_gpus(busy: float, held: float | None) -> int:
    """The GPUs to ask for when ``busy`` of the ``held`` GPUs were busy on average (the module's whole-GPU
    rule): ``ceil(busy - WHOLE_GPU_TOLERANCE)``, at least 1, at most what the job held."""
    n = max(1, math.ceil(busy - WHOLE_GPU_TOLERANCE))
    return n if not held else min(n, max(1, round(held)))


def recommendation_from(history: UsageHistory) -> Recommendation:
    busy, mem, run = history.busy_gpus, history.peak_memory_mib, history.runtime_s
    return Recommendation(
        key=history.key, runs=history.runs, gpus_requested=round(history.gpus_requested, 2),
        busy_gpus=None if busy is None else round(busy, 2),
        peak_memory_mib=None if mem is None else round(mem),
        runtime_s=None if run is None else round(run),
        gpus=None if busy is None else whole_gpus(busy, history.gpus_requested),
        memory_gib=None if mem is None else round(mem * HEADROOM / 1024, 1),
        max_runtime_s=None if run is None else max(60, math.ceil(run * HEADROOM)),
        memory_source=history.peak_memory_source,
    )


def learn(usage: AttemptUsage, *, succeeded: bool) -> None:
    """Fold one finished attempt into its owner's histories, recording first what they predicted for it."""
    job = usage.job
    if usage.samples < MIN_SAMPLES or usage.busy_gpus is None:
        return
    peak, measured_by = peak_of(usage, fraction=bool(job.share_milli))
    runtime = None
    if succeeded and usage.ended_at and usage.started_at:
        runtime = (usage.ended_at - usage.started_at).total_seconds()
    for key in keys_for(name=job.name, image=job.image):
        with transaction.atomic():
            history, _ = UsageHistory.objects.select_for_update().get_or_create(
                owner_id=job.owner_id, department_id=job.department_id, key=key)
            if history.runs:
                try:
                    with transaction.atomic():
                        PredictionOutcome.objects.create(
                            owner_id=job.owner_id, department_id=job.department_id, job=job, attempt=usage.attempt,
                            key=key, runs_before=history.runs,
                            predicted_busy_gpus=history.busy_gpus, actual_busy_gpus=usage.busy_gpus,
                            predicted_peak_memory_mib=history.peak_memory_mib,
                            actual_peak_memory_mib=peak,
                            predicted_runtime_s=history.runtime_s if runtime is not None else None,
                            actual_runtime_s=runtime)
                except IntegrityError:
                    continue  # this attempt was learnt already (a collector run retried)
            history.runs += 1
            history.gpus_requested = ewma(history.gpus_requested if history.runs > 1 else None, usage.gpus)
            history.busy_gpus = ewma(history.busy_gpus, usage.busy_gpus)
            history.peak_memory_mib = ewma(history.peak_memory_mib, peak)
            if peak is not None:
                history.peak_memory_source = measured_by
            if runtime is not None:
                history.runtime_s = ewma(history.runtime_s, runtime)
                history.runtime_runs += 1
            history.save()


def prediction_errors(outcomes) -> dict:
    """Mean absolute error and mean signed error (predicted - actual) of each predicted quantity."""
    out = {}
    for name in ("busy_gpus", "peak_memory_mib", "runtime_s"):
        pairs = [(getattr(o, f"predicted_{name}"), getattr(o, f"actual_{name}")) for o in outcomes]
        pairs = [(p, a) for p, a in pairs if p is not None and a is not None]
        if pairs:
            out[name] = {"n": len(pairs), "mae": round(sum(abs(p - a) for p, a in pairs) / len(pairs), 2),
                         "bias": round(sum(p - a for p, a in pairs) / len(pairs), 2),
                         "under": round(sum(p * HEADROOM < a for p, a in pairs) / len(pairs), 3)}
    return out


# A job that needs more than this part of a GPU keeps a whole one: the saving is small, and a neighbour on the
# same GPU would squeeze its compute.
FRACTION_MAX = 0.5
GIB = 1024


@dataclass(frozen=True)
class FractionFit:
    """The fraction of one GPU of a shareable flavor that holds a job's measured use, headroom included."""

    mechanism: str  # "hami" or "replicas" (engine.fractions)
    share: float  # the part of a GPU it is (engine.fractions.fraction), what quotas and prices count
    gpu_memory_gib: int | None  # HAMi: the memory to ask for (the peak x HEADROOM, rounded up to a GiB)
    gpu_cores: int | None  # HAMi: a compute share, only where the busy share outgrows the memory share
    gpu_replicas: int | None  # replicas: the replicas to ask for
    peak_memory_mib: float
    busy_gpus: float

    @property
    def request_text(self) -> str:
        if self.gpu_replicas:
            return f"{self.gpu_replicas} replica{'s' if self.gpu_replicas != 1 else ''}"
        return f"{self.gpu_memory_gib} GiB" + (f", {self.gpu_cores}% compute" if self.gpu_cores else "")


def fraction_fit(*, peak_memory_mib: float | None, busy_gpus: float | None, gpus_held: float | None,
                 flavor) -> FractionFit | None:
    """The fraction of one GPU of ``flavor`` a job that used ``busy_gpus`` GPUs and ``peak_memory_mib`` MiB at
    most (of one GPU) fits in, with ``HEADROOM`` on both; None where the flavor does not share its GPUs, the
    use is unmeasured, the job held several GPUs and kept more than one busy, or the fraction would be more than
    ``FRACTION_MAX`` of a GPU."""
    if flavor is None or not getattr(flavor, "shareable", False) or peak_memory_mib is None or busy_gpus is None:
        return None
    if whole_gpus(busy_gpus, gpus_held) > 1:
        return None
    memory_gib = max(1, math.ceil(peak_memory_mib * HEADROOM / GIB))
    busy_share = min(1.0, busy_gpus * HEADROOM)
    total_gib = flavor.gpu_memory_gib
    if flavor.sharing == HAMI:
        if memory_gib >= total_gib:
            return None
        cores = math.ceil(busy_share * FULL_CORES)
        cores = cores if cores > memory_gib * FULL_CORES / total_gib else 0
        milli = fraction_of(HAMI, flavor.share_capacity, memory_mib=memory_gib * GIB, cores=cores)
        fit = FractionFit(HAMI, milli / MILLI, memory_gib, cores or None, None, peak_memory_mib, busy_gpus)
    else:
        per_gpu = flavor.replicas_per_gpu
        needed = max(busy_share, memory_gib / total_gib if total_gib else 0.0)
        replicas = max(1, math.ceil(needed * per_gpu - 1e-9))
        milli = fraction_of(REPLICAS, per_gpu, replicas=replicas)
        fit = FractionFit(REPLICAS, milli / MILLI, None, None, replicas, peak_memory_mib, busy_gpus)
    return fit if fit.share <= FRACTION_MAX else None


def fraction_advice(fit: FractionFit, *, flavor, tier: str, whole_gpus: float, what: str = "this job",
                    source: str = "dcgm") -> dict:
    """A fraction the right-sizer recommends, priced: what it would cost an hour at ``flavor``'s ``tier`` price
    against the ``whole_gpus`` it holds (or would hold), and the sentence the quote, the job page and gpup show."""
    rate = budgets.price_for(flavor_id=flavor.pk, tier=tier)
    # mcr an hour, in whole numbers (the share in milli-GPUs), rounded up as the ledger rounds a charge
    fraction_cost = -(-rate * round(fit.share * MILLI) // MILLI) / 1000
    whole_cost = budgets.cost_of(rate=rate, gpu_seconds=3600 * whole_gpus) / 1000
    text = (f"{what} used {fit.peak_memory_mib / 1024:.0f} GB at most: {fit.share:g} GPU ({fit.request_text}) "
            f"would cost {fraction_cost:.1f} credits an hour instead of {whole_cost:.1f}")
    return {"source": source, "mechanism": fit.mechanism, "share": fit.share, "gpu_memory_gib": fit.gpu_memory_gib,
            "gpu_cores": fit.gpu_cores, "gpu_replicas": fit.gpu_replicas, "flavor": flavor.name, "tier": tier,
            "credits_per_hour": fraction_cost, "whole_credits_per_hour": whole_cost, "text": text}
