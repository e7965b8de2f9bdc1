"""The simulated cluster backend (the embedded default): nodes from the Node table, pods in the SimPod table.

It honours the same rules as a real cluster where they matter to the portal: pods are created gated with
deterministic names (a duplicate create adopts the existing pod), an ungated pod starts on the node it was
admitted to and runs for its job's declared max runtime (or ``SIM_DURATION_S`` from the job's env) divided
by ``SIM_SPEEDUP``, an eviction ends it with reason ``Evicted``. ``advance()`` is the simulated kubelet. Its
time comes from ``self.clock`` (``clock.py``: real time, or the clock a test controls), never from the wall
directly.

Loaded only by ``scheduling.backends.get_backend``, once Django's apps are ready (so it may import models).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Collection, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Case, DateTimeField, Exists, F, OuterRef, Value, When
from django.db.models.functions import Concat

from engine.types import Node as CoreNode
from portal.timestamps import log_stamp
from scheduling.backends.base import (
    EVERY_OBJECT,
    AttemptObjects,
    BackendError,
    ClusterBackend,
    EvictionOutcome,
    Inventory,
    PodSet,
    PodState,
)
from scheduling.backends.clock import Clock, sim_clock
from scheduling.backends.kube.podspec import rendezvous_env
from scheduling.models import Job, JobState, Node, SimPod
from workloads.values import SHM_PATH

log = logging.getLogger(__name__)


class SimulatedBackend(ClusterBackend):
    owns_inventory = False  # its nodes are the Node table itself
    def __init__(self, name: str = "default", speedup: float | None = None, clock: Clock | None = None):
        self.name = name
        self.speedup = speedup or settings.SIM_SPEEDUP
        self.clock = clock or sim_clock()

    # ------------------------------------------------------------------ kubelet
    def advance(self) -> int:
        """Finish every running pod whose (sped-up) runtime has elapsed. Returns how many finished."""
        now = self.clock.now()
        # failed? -> its pods' ids by the time their runtime ran out: a pod ends then, not when this kubelet next
        # looked, so the job's times and bill do not depend on how often the cluster is synced
        ended: dict[bool, dict[datetime, list[int]]] = {False: defaultdict(list), True: defaultdict(list)}
        for pk, started_at, runtime_s, exit_code in SimPod.objects.filter(
            cluster=self.name, phase="Running"
        ).values_list("pk", "started_at", "runtime_s", "exit_code"):
            if not math.isfinite(runtime_s or 0.0):  # a row written before submit checked it: end it now
                runtime_s = 0.0
            end = started_at + timedelta(seconds=runtime_s / self.speedup) if started_at else None
            if end and now >= end:
                ended[exit_code not in (None, 0)][end].append(pk)
        done = 0
        for fail, by_end in ended.items():  # two UPDATEs, whatever the number of pods that ended
            if by_end:
                pks = [pk for group in by_end.values() for pk in group]
                stop_standins(SimPod.objects.filter(pk__in=pks))
                done += SimPod.objects.filter(pk__in=pks, phase="Running").update(
                    phase="Failed" if fail else "Succeeded",
                    reason="Error" if fail else "Completed",
                    finished_at=Case(*(When(pk__in=group, then=Value(end)) for end, group in by_end.items()),
                                     default=Value(now), output_field=DateTimeField()),
                    log=Concat(F("log"), Value("exited with an error\n" if fail else "done\n")),
                )
        return done

    # ------------------------------------------------------------------ interface
    def inventory(self, *, namespaces: Collection[str] | None = None) -> Inventory:
        return self._inventory(SimPod.objects.filter(cluster=self.name))

    def sync_inventory(self, *, namespaces: Collection[str] | None = None) -> Inventory:
        """The pods of the jobs admitted or running now only: every waiting job has its gated pod here (pods
        are created at submission) and every job that ended keeps its pods until the reconciler deletes them,
        so the whole list grew with the queue and with the jobs run, read in full every sync."""
        active = Job.objects.filter(pk=OuterRef("job_id"), state__in=(JobState.ADMITTED, JobState.RUNNING))
        return self._inventory(SimPod.objects.filter(Exists(active), cluster=self.name))

    def _inventory(self, pods) -> Inventory:
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
        pods = tuple(_state(p) for p in pods.defer("log").order_by("job_id", "index"))
        return Inventory(nodes=nodes, pods=pods)

    def ensure_pods(self, podset: PodSet) -> None:
        env = dict(podset.env)
        runtime = _number(env.get("SIM_DURATION_S"), float, default=podset.max_runtime_s,
                          low=0, high=podset.max_runtime_s)
        if podset.has_route and "SIM_DURATION_S" not in env:
            runtime *= self.speedup  # people work in it and call it: its lifetime passes in wall-clock time
        exit_code = _number(env.get("SIM_EXIT_CODE"), int, default=0, low=0, high=255)
        mounts = self.make_mounts(podset)
        created_at = self.clock.now()  # the log's first lines are stamped with it
        # One INSERT for the gang; a pod that exists already (a retried create) is adopted, as AlreadyExists is
        SimPod.objects.bulk_create([
            SimPod(
                cluster=self.name,
                namespace=podset.namespace,
                name=name,
                job_id=podset.job_id,
                attempt=podset.attempt,
                index=i,
                runtime_s=runtime,
                exit_code=exit_code or None,
                log=f"$ {' '.join(podset.for_pod(i).command)}\n{_mounts_line(podset)}{_secrets_line(podset)}",
                created_at=created_at,
                mounts=mounts,
                # the same variables, in the same order, as the Kubernetes pod's container
                env=dict((*podset.env, *podset.workload.env, *rendezvous_env(podset, i))),
            )
            for i, name in enumerate(podset.pod_names)
        ], ignore_conflicts=True)

    def start(self, podset: PodSet, placement: tuple[str, ...], *, fresh: bool = True) -> None:
        """Ungate the attempt's pods in one UPDATE when they were all made at submission and are all still
        gated (the usual case); otherwise create what is missing and ungate as ``admit`` does, which also
        counts a pod already ungated as done. A session's pods start their stand-ins through ``admit``."""
        if not (podset.has_route and settings.SIM_SESSION_STANDIN) and self._ungate_all(podset, placement):
            return
        super().start(podset, placement, fresh=fresh)

    def _ungate_all(self, podset: PodSet, placement: tuple[str, ...]) -> bool:
        """Ungate every pod of the attempt on its node, all or none: True when every one was gated and now
        runs; False (nothing changed) when any is missing or was ungated already."""
        names = podset.pod_names
        gated = SimPod.objects.filter(cluster=self.name, namespace=podset.namespace, name__in=names, gated=True)
        if len(names) == 1:  # one statement, all or nothing by itself
            return gated.update(gated=False, node=placement[0], phase="Running", started_at=self.clock.now()) == 1
        node = Case(*[When(name=name, then=Value(placement[i])) for i, name in enumerate(names)],
                    output_field=SimPod._meta.get_field("node"))
        with transaction.atomic():
            if gated.update(gated=False, node=node, phase="Running", started_at=self.clock.now()) == len(names):
                return True
            transaction.set_rollback(True)  # a gang is started whole or not at all
        return False

    def resize(self, podset: PodSet, before: tuple[str, ...], after: tuple[str, ...]) -> EvictionOutcome:
        """A grow makes the new ranks gated, then ungates them all at once on their nodes, running until the
        attempt's other pods end (the job's work is shared, not lengthened); a shrink evicts the highest ranks,
        which the simulated kubelet ends at once (no disruption budget of its own: the cycle's snapshot holds
        the job's ``pdb_min_available``, which the engine never lets a shrink go below)."""
        pods = SimPod.objects.filter(cluster=self.name, namespace=podset.namespace, job_id=podset.job_id,
                                     attempt=podset.attempt)
        if len(after) < len(before):
            leaving = pods.filter(index__gte=len(after))
            names = tuple(leaving.order_by("-index").values_list("name", flat=True))
            stop_standins(leaving)
            leaving.delete()
            return EvictionOutcome("done", pods=names)
        first = pods.filter(index=0, phase="Running").first()
        if first is None:
            raise BackendError(f"job {podset.job_id}: no running pod to grow from")
        now = self.clock.now()
        end = first.started_at + timedelta(seconds=first.runtime_s / self.speedup)
        left = max(0.0, (end - now).total_seconds() * self.speedup)
        new = range(len(before), len(after))
        SimPod.objects.bulk_create([
            SimPod(cluster=self.name, namespace=podset.namespace, name=podset.pod_name(i), job_id=podset.job_id,
                   attempt=podset.attempt, index=i, runtime_s=left, exit_code=first.exit_code, created_at=now,
                   log=f"$ {' '.join(podset.command)}\njoined the rendezvous at size {len(after)}\n",
                   mounts=first.mounts, env=dict((*podset.env, *podset.workload.env, *rendezvous_env(podset, i))))
            for i in new], ignore_conflicts=True)
        gated = pods.filter(index__in=list(new), gated=True)
        if pods.filter(index__in=list(new)).count() < len(new):
            return EvictionOutcome("pending")  # (all of them exist before any is ungated)
        node = Case(*[When(index=i, then=Value(after[i])) for i in new], output_field=SimPod._meta.get_field("node"))
        gated.update(gated=False, node=node, phase="Running", started_at=now)
        return EvictionOutcome("done", pods=tuple(podset.pod_name(i) for i in new))

    def make_mounts(self, podset: PodSet) -> list[dict]:
        """The simulated kubelet's volumes: one real directory per source under DATA_DIR (the same for every
        pod and attempt that mounts it), created when missing, as a provisioner's claim would be."""
        out = []
        for m in podset.workload.mounts:
            directory = volume_dir(m.storage, m.sub_path)
            directory.mkdir(parents=True, exist_ok=True)
            out.append({"source": m.source, "path": m.path, "dir": str(directory), "read_only": m.read_only,
                        "checkpoint": m.checkpoint})
        if podset.workload.shm_mb:
            out.append({"source": "", "path": SHM_PATH, "medium": "Memory", "size_mb": podset.workload.shm_mb})
        return out

    def delete_checkpoint(self, *, namespace: str, claim_name: str, storage: str, sub_path: str, job_id: int) -> None:
        shutil.rmtree(volume_dir(storage, sub_path), ignore_errors=True)

    def readable_dir(self, *, storage: str, sub_path: str) -> Path | None:
        """The simulated cluster's volumes are directories of this machine: always readable."""
        try:
            return volume_dir(storage, sub_path)
        except BackendError:
            return None

    def admit(self, podset: PodSet, placement: tuple[str, ...]) -> None:
        pods = {p.name: p for p in SimPod.objects.filter(cluster=self.name, namespace=podset.namespace,
                                                         name__in=podset.pod_names)}
        if len(pods) != podset.pods:
            raise BackendError(f"gang of job {podset.job_id}: {len(pods)}/{podset.pods} pods exist")
        now = self.clock.now()
        for i, name in enumerate(podset.pod_names):
            if SimPod.objects.filter(pk=pods[name].pk, gated=True).update(
                gated=False, node=placement[i], phase="Running", started_at=now
            ) and podset.has_route and settings.SIM_SESSION_STANDIN:
                self.start_standin(pods[name].pk, podset)

    def start_standin(self, pk: int, podset: PodSet) -> None:
        """Start the pod's app: the stand-in HTTP + WebSocket server on loopback (``standin.py``), whose address
        the session proxy reaches. A stand-in that does not start leaves the pod running but not ready."""
        argv = [sys.executable, "-m", "scheduling.backends.standin", "--base", f"/s/{podset.job_id}/",
                "--readiness", podset.readiness_path or "/", "--title", f"{podset.job_name} (job {podset.job_id})",
                "--lifetime", str(podset.max_runtime_s + 60)]
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,  # noqa: S603 - ours
                                    stdin=subprocess.DEVNULL, text=True)
            line = proc.stdout.readline().strip() if proc.stdout else ""
        except OSError as exc:
            log.warning("stand-in of pod %s did not start: %s", pk, exc)
            return
        if not line.startswith("LISTENING "):
            log.warning("stand-in of pod %s said %r instead of where it listens", pk, line)
            proc.kill()
            return
        SimPod.objects.filter(pk=pk).update(address=line.split()[1], pid=proc.pid)

    def notify(self, *, job_id: int, attempt: int, namespace: str, annotations) -> tuple[str, ...]:
        """The simulated pods have no annotations to set (no container reads a file): the pods that would be
        told, for the record; the portal keeps what it told (``PreemptionVictim``)."""
        return tuple(SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt,
                                           phase__in=("Pending", "Running")).values_list("name", flat=True))

    def evict(self, *, job_id: int, attempt: int, namespace: str) -> EvictionOutcome:
        pods = SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt)
        names = tuple(pods.values_list("name", flat=True))
        if not names:
            return EvictionOutcome("gone")
        stop_standins(pods)
        pods.filter(phase__in=("Pending", "Running")).update(
            phase="Failed", reason="Evicted", finished_at=self.clock.now()
        )
        return EvictionOutcome("accepted", pods=names)

    def fail_pod(self, *, job_id: int, attempt: int, index: int, exit_code: int | None = 1, reason: str = "Error",
                 message: str = "") -> int:
        """The simulated kubelet sees pod ``index`` of the attempt fail now (an exit code, ``OOMKilled``,
        ``Evicted``, ``ImagePullBackOff`` with a registry's message ...): what tests and the demo use to drive
        a failure. Returns how many pods it failed (0: no such running or pending pod)."""
        pods = SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt, index=index,
                                     phase__in=("Pending", "Running"))
        stop_standins(pods)
        return pods.update(
            phase="Failed", reason=reason, message=message[:500], exit_code=exit_code, finished_at=self.clock.now(),
            log=Concat(F("log"), Value(f"{message or reason}\n")))

    def delete_pods(self, *, job_id: int, attempt: int, namespace: str,
                    objects: AttemptObjects = EVERY_OBJECT) -> None:
        pods = SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt)
        stop_standins(pods)
        pods.delete()

    def delete_pod(self, *, job_id: int, attempt: int, namespace: str, index: int) -> bool:
        pods = SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt, index=index)
        stop_standins(pods)
        pods.delete()
        return True

    def route_upstream(self, *, job_id: int, attempt: int) -> str:
        """The stand-in's loopback address, once its pod runs (the demo's session proxy forwards there)."""
        return (SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt, phase="Running")
                .exclude(address="").order_by("index").values_list("address", flat=True).first() or "")

    def logs(self, *, job_id, attempt, namespace, tail_lines=200, follow=False, pod=0, timestamps=False,
             since=None) -> Iterator[str]:
        pod = SimPod.objects.filter(cluster=self.name, job_id=job_id, attempt=attempt, index=pod).first()
        if pod is None:
            return iter(())
        stamped = _stamped_lines(pod, self.clock.now(), self.speedup)
        if since is not None:
            stamped = [(at, line) for at, line in stamped if at >= since]
        if tail_lines is not None:
            stamped = stamped[-tail_lines:] if tail_lines > 0 else []
        return iter([f"{log_stamp(at)} {line}" if timestamps else line for at, line in stamped])


def _stamped_lines(pod, now: datetime, speedup: float) -> list[tuple[datetime, str]]:
    """The simulated pod's log with the time each line was written: its first lines when the pod was created (on
    the cluster's clock, as its start), the line its end added at its end, and while it runs a progress line per simulated minute
    (dropped once the pod has ended: the simulated log keeps no more than its row)."""
    lines = pod.log.splitlines()
    start = pod.created_at  # never changes: a line keeps its stamp
    ended = 1 if pod.finished_at and lines else 0
    # A microsecond apart, as a real runtime's stamps of lines written together are (nanoseconds apart).
    stamped = [(start + timedelta(microseconds=i), line) for i, line in enumerate(lines[:len(lines) - ended])]
    after = timedelta(microseconds=len(stamped))
    if pod.phase == "Running" and pod.started_at:
        elapsed = (now - pod.started_at).total_seconds() * speedup
        stamped += [(pod.started_at + after + timedelta(seconds=s / speedup), f"[sim] step {int(s)}: running")
                    for s in range(0, int(elapsed), 60)]
    if ended:
        stamped.append((max(pod.finished_at, start + after), lines[-1]))
    return stamped


def stop_standins(pods) -> None:
    """End the stand-in processes of these pods (those that have one), and forget their address."""
    for pk, pid in pods.exclude(pid=None).values_list("pk", "pid"):
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass  # gone already (it ends with its parent), or no longer ours
        SimPod.objects.filter(pk=pk).update(pid=None, address="")


def volume_dir(storage: str, sub_path: str = "") -> Path:
    """Where the simulated cluster keeps a source's files: DATA_DIR/volumes/<cluster>/<source>[/<sub_path>].
    Both parts come from validated names and paths (no "..", no leading "/"); checked again here."""
    root = (Path(settings.DATA_DIR) / "volumes").resolve()
    path = (root / storage / sub_path).resolve()
    if root not in path.parents:
        raise BackendError(f"volume path {storage}/{sub_path} leaves the simulated cluster's volumes")
    return path


def _mounts_line(podset: PodSet) -> str:
    """The data sources the simulated kubelet mounted, so a reader of the log sees each attempt's (a checkpoint
    directory is the same source and sub-path for every attempt of a job). ``/dev/shm``, which every job has,
    is left to ``SimPod.mounts``."""
    parts = [f"{m.path} <- {m.source}{':' + m.sub_path if m.sub_path else ''} "
             f"({'read-only' if m.read_only else 'read-write'})" for m in podset.workload.mounts]
    return f"[sim] mounts: {'; '.join(parts)}\n" if parts else ""


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
        message=p.message,
        started_at=p.started_at.timestamp() if p.started_at else None,
        finished_at=p.finished_at.timestamp() if p.finished_at else None,
        # the simulated kubelet's readiness probe: the stand-in said where it listens (without stand-ins, as
        # in the tests, a running pod is ready)
        ready=p.phase == "Running" and (bool(p.address) or not settings.SIM_SESSION_STANDIN),
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
