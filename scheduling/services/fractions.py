"""Fractional GPUs on the portal's side (docs/fractions.md): a request's share of a GPU from its flavor, the
engine's ``Share`` of a job, and the field errors of a fractional request that could never run.

The one number "what fraction of a GPU is this" is ``engine.fractions.fraction`` (milli-GPUs); it is stored with
the job (``Job.share_milli``) at submission, so that sums over many jobs need no flavor.
"""

from __future__ import annotations

import math

from engine.fractions import HAMI, REPLICAS, Share, fraction_of
from quotas.models import Flavor, GpuSharing

MIB_PER_GIB = 1024


def share_of(job, flavor: Flavor | None = None) -> Share | None:
    """The engine's share of one pod of ``job`` (None: whole GPUs)."""
    if not job.share_milli:
        return None
    flavor = flavor or job.flavor
    if flavor.sharing == GpuSharing.HAMI:
        return Share(HAMI, flavor.share_capacity, memory_mib=job.gpu_memory_mib, cores=job.gpu_cores)
    return Share(REPLICAS, flavor.share_capacity, replicas=job.gpu_replicas)


def share_milli(flavor: Flavor, *, memory_mib: int = 0, cores: int = 0, replicas: int = 0) -> int:
    """The fraction of a GPU of ``flavor`` a pod asking for these is, in milli-GPUs."""
    mechanism = HAMI if flavor.sharing == GpuSharing.HAMI else REPLICAS
    return fraction_of(mechanism, flavor.share_capacity, memory_mib=memory_mib, cores=cores, replicas=replicas)


def request_problems(flavor: Flavor | None, *, gpus: int | None, memory_gib: float | None, cores: int | None,
                     replicas: int | None) -> dict[str, str]:
    """Why a fractional request (GPU memory and a compute share, or replicas) cannot run on ``flavor``: field
    name -> message (empty: it can, or it is no fraction). ``gpus`` the GPUs per pod asked for (None: not)."""
    asked = {name for name, v in (("gpu_memory_gib", memory_gib), ("gpu_cores", cores),
                                  ("gpu_replicas", replicas)) if v is not None}
    if not asked or flavor is None:
        return {}
    first = sorted(asked)[0]
    if flavor.is_cpu:
        return {first: f"{flavor.name!r} is a CPU pool: it has no GPUs to share."}
    if not flavor.sharing:
        return {first: f"{flavor.name!r} does not share its GPUs: ask for whole GPUs, or use a flavor that "
                       "shares them (docs/fractions.md)."}
    errors: dict[str, str] = {}
    if gpus is not None and gpus != 1:
        errors["gpus"] = "A fraction is a part of one GPU per pod: ask for 1 GPU per pod (or leave gpus out)."
    if flavor.sharing == GpuSharing.HAMI:
        if replicas is not None:
            errors["gpu_replicas"] = (f"{flavor.name!r} shares GPUs by memory (HAMi): ask for gpu_memory_gib "
                                      "(and optionally gpu_cores), not replicas.")
        if memory_gib is None:
            errors["gpu_memory_gib"] = "Required for a fraction of this flavor: the GPU memory the pod needs."
        elif memory_gib * MIB_PER_GIB > flavor.share_capacity:
            errors["gpu_memory_gib"] = (f"{memory_gib:g} GiB is more than one GPU of {flavor.name!r} has "
                                        f"({flavor.gpu_memory_gib} GiB).")
    else:
        for name in ("gpu_memory_gib", "gpu_cores"):
            if name in asked:
                errors[name] = (f"{flavor.name!r} shares GPUs as {flavor.replicas_per_gpu} replicas each "
                                "(time-slicing / MPS): ask for gpu_replicas.")
        if replicas is not None and replicas > flavor.replicas_per_gpu:
            errors["gpu_replicas"] = (f"{replicas} replicas are more than one GPU of {flavor.name!r} is shared "
                                      f"into ({flavor.replicas_per_gpu}); ask for whole GPUs instead.")
    return errors


def describe_request(job) -> dict | None:
    """A fractional job's request as the API and pages show it (None: whole GPUs)."""
    if not job.share_milli:
        return None
    return {"gpu_memory_gib": job.gpu_memory_mib / MIB_PER_GIB if job.gpu_memory_mib else None,
            "gpu_cores": job.gpu_cores or None, "gpu_replicas": job.gpu_replicas or None,
            "share": job.share_milli / 1000}



def session_default(flavor: Flavor | None, share: float | None) -> dict[str, float | int] | None:
    """The fraction a session on ``flavor`` gets when it asks for no size of its own (SESSION_DEFAULT_GPU_FRACTION
    = ``share``): ``{"gpu_memory_gib": n}`` under HAMi (the share of the GPU's memory, rounded to a whole GiB, at
    least 1), ``{"gpu_replicas": n}`` under replicas (the fewest replicas that cover the share). None: no default
    (the setting is off, or the flavor does not share its GPUs)."""
    if not share or flavor is None or flavor.is_cpu or not flavor.sharing:
        return None
    if flavor.sharing == GpuSharing.HAMI:
        if not flavor.gpu_memory_gib:
            return None
        return {"gpu_memory_gib": max(1, min(flavor.gpu_memory_gib, round(share * flavor.gpu_memory_gib)))}
    # the fewest replicas whose share is at least ``share`` (a small tolerance: 0.25 x 4 is exactly 1)
    return {"gpu_replicas": max(1, min(flavor.replicas_per_gpu, math.ceil(share * flavor.replicas_per_gpu - 1e-9)))}


def describe_default(flavor: Flavor, share: float | None) -> str:
    """The session default on ``flavor`` as the submit form says it ("" : none)."""
    default = session_default(flavor, share)
    if default is None:
        return ""
    if "gpu_memory_gib" in default:
        return f"{flavor.name}: {default['gpu_memory_gib']} GiB"
    return f"{flavor.name}: {default['gpu_replicas']} of {flavor.replicas_per_gpu} replicas"
