"""Plausible GPU series for the simulated cluster, so the embedded demo shows busy, idle, saw-tooth and
memory-bound jobs without a GPU or Prometheus.

The shape comes from the job's env ``SIM_GPU_PROFILE`` (busy, idle, sawtooth, memory), else from its name
(notebooks idle), else from its id. Time is the job's own, as the simulated cluster runs it: a batch job's
``SIM_SPEEDUP`` simulated seconds pass per real second, so a job that runs an hour of simulated time shows an
hour of samples (and idle minutes are simulated minutes), while a session or service lives on the wall's
clock (people work in it), so a notebook one real minute old shows one minute of samples, as the idle-session
cull reads them. The noise is seeded by job, attempt and GPU: the same attempt always draws the same series.
"""

from __future__ import annotations

import math
import random
from datetime import datetime

from django.conf import settings

from observability.services.prometheus import step_for
from observability.services.series import GpuSeries

PROFILES = ("busy", "idle", "sawtooth", "memory")
SAWTOOTH_PERIOD_S = 120  # simulated seconds per load/compute cycle of a data-loader-bound job


def profile_of(job) -> str:
    chosen = str((job.env or {}).get("SIM_GPU_PROFILE", "")).strip().lower()
    if chosen in PROFILES:
        return chosen
    name = job.name.lower()
    if any(word in name for word in ("notebook", "jupyter", "interactive", "debug")):
        return "idle"
    return PROFILES[job.pk % len(PROFILES)] if job.pk else "busy"


def sample(profile: str, rng: random.Random, t: float, total_mib: float) -> tuple[float, float]:
    """(utilisation %, used MiB) of one GPU at simulated second ``t`` of the attempt."""
    noise = rng.gauss(0, 1)
    if profile == "idle":
        return max(0.0, min(3.0, 0.5 + noise * 0.5)), total_mib * 0.08
    if profile == "sawtooth":
        loading = (t % SAWTOOTH_PERIOD_S) < SAWTOOTH_PERIOD_S * 0.45
        util = 3 + abs(noise) * 2 if loading else 94 + noise * 3
        return max(0.0, min(100.0, util)), total_mib * 0.55
    if profile == "memory":
        return max(0.0, min(100.0, 35 + noise * 8)), total_mib * (0.96 + 0.01 * math.sin(t / 300))
    warmup = min(1.0, t / 120)  # busy: a short warm-up, then steady compute
    return max(0.0, min(100.0, (93 + noise * 3) * warmup)), total_mib * (0.2 + 0.5 * warmup)


class SimulatedSource:
    name = "simulated"

    def read(self, *, job, attempt: int, namespace: str, start: datetime, end: datetime) -> GpuSeries:
        # the job's own clock: a batch job's runs SIM_SPEEDUP times the wall's, a session's is the wall's
        speedup = 1.0 if job.has_route else float(settings.SIM_SPEEDUP)
        sim_duration = max(0.0, (end - start).total_seconds() * speedup)
        step = step_for(sim_duration)
        total_mib = float(job.flavor.gpu_memory_gib or 80) * 1024
        # A fractional pod sees its part of the GPU, as the sharing layer reports it per container: HAMi's memory
        # limit (``gpumem``) as the GPU's memory and its compute share as the most it can be busy; a replica
        # its share of the memory (time-slicing limits none, but a fair neighbour keeps to it).
        cap = 100.0
        if job.share_milli:
            total_mib = float(job.gpu_memory_mib) if job.gpu_memory_mib else total_mib * job.share_milli / 1000
            cap = float(job.gpu_cores or 100)
        profile = profile_of(job)
        out = GpuSeries(step_s=step)
        base = f"job-{job.pk}-a{attempt}"
        for pod in range(job.pods):
            for gpu in range(job.gpus_per_pod):
                key = f"{base if job.pods == 1 else f'{base}-{pod}'}/{gpu}"
                rng = random.Random(f"{job.pk}-{attempt}-{pod}-{gpu}")
                # In a gang, the first GPU of a job that asked for several does the work and the rest idle:
                # the over-asking the right-sizing is there to catch, on every fourth job.
                lazy = job.pk % 4 == 0 and gpu > 0
                util, used, free = {}, {}, {}
                for t in range(0, int(sim_duration) + 1, step):
                    u, m = sample("idle" if lazy else profile, rng, t, total_mib)
                    u = min(u, cap)
                    util[t], used[t], free[t] = round(u, 1), round(m), round(total_mib - m)
                out.util[key], out.fb_used[key], out.fb_free[key] = util, used, free
        return out
