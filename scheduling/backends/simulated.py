"""The simulated cluster backend (the embedded default): nodes from the Node table, pods in the SimPod table.

It honours the same rules as a real cluster where they matter to the portal: pods are created gated with
deterministic names (a duplicate create adopts the existing pod), an ungated pod starts on the node it was
admitted to and runs for its job's declared max runtime (or ``SIM_DURATION_S`` from the job's env) divided
by ``SIM_SPEEDUP``, an eviction ends it with reason ``Evicted``. ``advance()`` is the simulated kubelet.

Loaded only by ``scheduling.backends.get_backend``, once Django's apps are ready (so it may import models).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from scheduling.backends.base import (
    BackendError,
    ClusterBackend,
    EvictionOutcome,
    Inventory,
    PodSet,
    PodState,
)
from scheduling.core.types import Node as CoreNode
from scheduling.models import Node, SimPod


class SimulatedBackend(ClusterBackend):
    owns_inventory = False  # its nodes are the Node table itself
    def __init__(self, name: str = "default", speedup: float | None = None):
        self.name = name
        self.speedup = speedup or settings.SIM_SPEEDUP

    # ------------------------------------------------------------------ kubelet
    def advance(self) -> int:
        """Finish every running pod whose (sped-up) runtime has elapsed. Returns how many finished."""
        now = timezone.now()
        ended: dict[bool, list[int]] = {False: [], True: []}  # failed? -> pod ids
        for pk, started_at, runtime_s, exit_code in SimPod.objects.filter(
            cluster=self.name, phase="Running"
        ).values_list("pk", "started_at", "runtime_s", "exit_code"):
            if not math.isfinite(runtime_s or 0.0):  # a row written before submit checked it: end it now
                runtime_s = 0.0
            if started_at and now >= started_at + timedelta(seconds=runtime_s / self.speedup):
                ended[exit_code not in (None, 0)].append(pk)
        done = 0
        for fail, pks in ended.items():  # two UPDATEs, whatever the number of pods that ended
            if pks:
                done += SimPod.objects.filter(pk__in=pks, phase="Running").update(
                    phase="Failed" if fail else "Succeeded",
                    reason="Error" if fail else "Completed",
                    finished_at=now,
                    log=Concat(F("log"), Value("exited with an error\n" if fail else "done\n")),
                )
        return done

    # ------------------------------------------------------------------ interface
    def inventory(self) -> Inventory:
        self.advance()
        nodes = tuple(
            CoreNode(
                name=n.name,
                flavor=n.flavor.name,
                gpus=n.gpus,
                used_by_others=n.used_by_others,
                cluster=self.name,
                labels=tuple(sorted((n.labels or {}).items())),
                taints=tuple(n.taints or ()),
                schedulable=n.schedulable,
            )
            for n in Node.objects.filter(cluster__name=self.name).select_related("flavor")
        )
        pods = tuple(_state(p) for p in SimPod.objects.filter(cluster=self.name).defer("log").order_by(
            "job_id", "index"))
        return Inventory(nodes=nodes, pods=pods)

    def ensure_pods(self, podset: PodSet) -> None:
        env = dict(podset.env)
        runtime = _number(env.get("SIM_DURATION_S"), float, default=podset.max_runtime_s,
                          low=0, high=podset.max_runtime_s)
        exit_code = _number(env.get("SIM_EXIT_CODE"), int, default=0, low=0, high=255)
        for i, name in enumerate(podset.pod_names):
            try:
                with transaction.atomic():
                    SimPod.objects.create(
                        cluster=self.name,
                        namespace=podset.namespace,
                        name=name,
                        job_id=podset.job_id,
                        attempt=podset.attempt,
                        index=i,
                        runtime_s=runtime,
                        exit_code=exit_code or None,
                        log=f"$ {' '.join(podset.command)}\n{_secrets_line(podset)}",
                    )
            except IntegrityError:
                pass  # AlreadyExists: a retried create adopts the pod

    def admit(self, podset: PodSet, placement: tuple[str, ...]) -> None:
        pods = {p.name: p for p in SimPod.objects.filter(cluster=self.name, namespace=podset.namespace,
                                                         name__in=podset.pod_names)}
        if len(pods) != podset.pods:
            raise BackendError(f"gang of job {podset.job_id}: {len(pods)}/{podset.pods} pods exist")
        now = timezone.now()
        for i, name in enumerate(podset.pod_names):
            SimPod.objects.filter(pk=pods[name].pk, gated=True).update(
                gated=False, node=placement[i], phase="Running", started_at=now
            )

    def evict(self, *, job_id: int, attempt: int, namespace: str) -> EvictionOutcome:
        pods = SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt)
        names = tuple(pods.values_list("name", flat=True))
        if not names:
            return EvictionOutcome("gone")
        pods.filter(phase__in=("Pending", "Running")).update(
            phase="Failed", reason="Evicted", finished_at=timezone.now()
        )
        return EvictionOutcome("accepted", pods=names)

    def delete_pods(self, *, job_id: int, attempt: int, namespace: str) -> None:
        SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt).delete()

    def logs(self, *, job_id, attempt, namespace, tail_lines=200, follow=False) -> Iterator[str]:
        pod = SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt).order_by("index").first()
        if pod is None:
            return iter(())
        lines = pod.log.splitlines()
        if pod.phase == "Running" and pod.started_at:
            elapsed = (timezone.now() - pod.started_at).total_seconds() * self.speedup
            lines += [f"[sim] step {int(s)}: running" for s in range(0, int(elapsed), 60)][-tail_lines:]
        return iter(lines[-tail_lines:])


def _secrets_line(podset: PodSet) -> str:
    """What the simulated kubelet would mount: variable names and file paths, never a value."""
    s = podset.secrets
    parts = [f"env {e.name} <- {e.secret}/{e.key}" for e in s.env]
    parts += [f"files {f.path} <- {f.secret}" for f in s.files]
    parts += [f"image pull secret {name}" for name in s.image_pull]
    return f"[sim] secrets: {'; '.join(parts)}\n" if parts else ""


def _state(p) -> PodState:
    return PodState(
        job_id=p.job_id,
        attempt=p.attempt,
        index=p.index,
        name=p.name,
        namespace=p.namespace,
        phase=p.phase,
        gated=p.gated,
        node=p.node or None,
        exit_code=p.exit_code if p.phase == "Failed" else (0 if p.phase == "Succeeded" else None),
        reason=p.reason,
        started_at=p.started_at.timestamp() if p.started_at else None,
        finished_at=p.finished_at.timestamp() if p.finished_at else None,
    )


def _number(text, kind, *, default, low, high):
    """``text`` as a finite number of ``kind`` within [low, high]; ``default`` for anything else. Submit
    validation refuses such values already; this keeps one old or hand-made row from stopping the
    simulated kubelet for every job."""
    if text is None:
        return default
    try:
        value = kind(text)
    except (TypeError, ValueError, OverflowError):
        return default
    if not math.isfinite(value):
        return default
    return min(max(value, low), high)
