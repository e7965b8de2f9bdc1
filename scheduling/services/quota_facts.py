"""Scheduling's answers to what quotas asks of it (``quotas.ports``): installed GPUs, GPUs in use, clusters,
a user's queued jobs and where attempts stand. Quotas stands below scheduling and never reads a job; these
are the facts it gets instead, as values. Registered in ``SchedulingConfig.ready()``."""

from __future__ import annotations

from django.db.models import F, Sum

from quotas.ports import AttemptState, CostInputs
from scheduling.models import ACTIVE_STATES, GPU_SHARE, Cluster, Job, JobRole, JobState, Node


class SchedulingQuotaFacts:
    def installed_gpus(self, *, flavor_id: int, cluster_id: int | None = None) -> int:
        """The GPUs of the flavor on schedulable nodes, of every cluster or of ``cluster_id`` only."""
        nodes = Node.objects.filter(flavor_id=flavor_id, schedulable=True)
        if cluster_id is not None:
            nodes = nodes.filter(cluster_id=cluster_id)
        return int(nodes.aggregate(n=Sum("gpus"))["n"] or 0)

    def gpus_in_use(self) -> dict[tuple[int, int, int | None], int]:
        """GPUs of admitted and running jobs by (department, flavor, cluster); a job without a cluster runs
        on the default one."""
        rows = (
            Job.objects.filter(state__in=ACTIVE_STATES)
            .values("department_id", "flavor_id", "cluster_id")
            .annotate(n=Sum(GPU_SHARE))
        )
        default = Cluster.objects.filter(is_default=True).values_list("pk", flat=True).first()
        usage: dict = {}
        for r in rows:
            key = (r["department_id"], r["flavor_id"], r["cluster_id"] or default)
            n = r["n"] or 0
            usage[key] = usage.get(key, 0) + (int(n) if float(n).is_integer() else n)  # whole GPUs stay whole
        return usage

    def cluster_named(self, name: str):
        return Cluster.objects.filter(name=name).first()

    def cpu_in_use(self) -> dict[tuple[int, int], tuple[int, int]]:
        """Millicores and MiB of admitted and running jobs' roles without GPUs, by (department, CPU pool), all
        clusters together (CPU quotas are global)."""
        rows = (JobRole.objects.filter(job__state__in=ACTIVE_STATES, gpus_per_pod=0, flavor__isnull=False)
                .values("job__department_id", "flavor_id")
                .annotate(c=Sum(F("pods") * F("cpu_millicores")), m=Sum(F("pods") * F("memory_mib"))))
        return {(r["job__department_id"], r["flavor_id"]): (int(r["c"] or 0), int(r["m"] or 0)) for r in rows}

    def queued_costs(self, *, owner_id: int, wallet_id: int) -> list[CostInputs]:
        """The cost inputs of the user's queued jobs in the department of ``wallet_id`` (one query)."""
        rows = Job.objects.filter(owner_id=owner_id, state=JobState.QUEUED, department__wallet__id=wallet_id
                                  ).values_list("flavor_id", "tier", "gpus_per_pod", "pods", "max_runtime_s", "bid",
                                                  "price_surcharge_pct", "share_milli")
        return [CostInputs(*row) for row in rows]

    def attempts(self, job_ids) -> dict[int, AttemptState]:
        """Each named job's current attempt, state and end times (one query)."""
        rows = Job.objects.filter(pk__in=list(job_ids)).values_list(
            "pk", "attempt", "state", "finished_at", "last_preempted_at")
        return {pk: AttemptState(pk=pk, attempt=attempt, state=state, active=state in ACTIVE_STATES,
                                 finished_at=finished_at, last_preempted_at=last_preempted_at)
                for pk, attempt, state, finished_at, last_preempted_at in rows}
