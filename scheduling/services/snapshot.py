"""Turn the database into the engine's frozen Snapshot, in a fixed, small number of queries.

Queries: clusters, nodes, quotas, policy, active jobs, queued jobs, recent usage, preemptions in flight, recent
preemption count, per-user GPU limits, and right-sizing's predicted run times through ``scheduling.ports`` (10,
whatever the number of jobs or nodes; two more when queued jobs have dependencies: the dependencies, and the jobs
they name with the tasks of the arrays they name), plus the budgets' one read of wallets and prices
(``quotas.budgets.read_for_cycle``: one query without budgets, two with). ``SnapshotContext`` keeps the Job rows the cycle
read so that applying the result compares against what the decision was made on.

Disruption budgets: when jobs wait and others could be preempted, each reachable cluster's backend is asked
for its budgets (``pdb_coverage``: for Kubernetes two LISTs, every PodDisruptionBudget over the portal's
running pods, whoever created it). A backend without budgets of its own (the simulated cluster) or one that
cannot answer leaves each job with the budget its ``pdb_min_available`` implies.

One clock: the engine's times are wall-clock seconds. A cluster that runs jobs faster than real time (the
simulated one in the demo, ``SIM_SPEEDUP``) runs a batch job's ``max_runtime_s`` in ``max_runtime_s / speedup``
seconds of the wall (a session's or service's in ``max_runtime_s``: people work in it), so the snapshot gives the engine each job's runtimes divided by its cluster's speed-up
(a waiting job's by the default cluster's, where the pages' estimates always were). Everything the engine
returns (estimated starts, reserved starts, the notes in its reasons) is then on the wall clock already, and
nothing downstream converts again.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import F, FloatField, Func, Q, Sum, Value
from django.db.models.functions import Cast, Coalesce, Exp, Greatest
from django.utils import timezone

from engine import tiers
from engine import types as core
from engine.shapes import CPU_KIND, resource_key
from engine.teams import account
from portal.timestamps import to_epoch
from quotas import selectors as quota_selectors
from quotas.budgets import read_for_cycle
from scheduling import ports
from scheduling.backends import get_backend, owns_inventory, speedup_of
from scheduling.backends.base import BackendError, PdbCoverage
from scheduling.models import (
    FINAL_STATES,
    GPU_SHARE,
    IN_FLIGHT,
    Cluster,
    Job,
    JobDependency,
    JobRole,
    JobState,
    NamespaceQuotaRefusal,
    Node,
    PreemptionVictim,
)
from scheduling.services.calendar import engine_calendar
from scheduling.services.fractions import share_of
from scheduling.services.job_rows import JobRows, read_uncached
from scheduling.services.policy import current_policy
from scheduling.services.resizes import held_placement
from workloads.services.resolve import source_clusters

log = logging.getLogger(__name__)


# When this process started: a cluster whose inventory the portal reads from it (Kubernetes) is not decided on
# until it has been synced since then; Node rows left from before (a demo seed, a node removed while the
# portal was down) would place jobs on nodes that may not exist.
PROCESS_STARTED = timezone.now()


@dataclass
class SnapshotContext:
    now: datetime
    policy_version: int
    jobs: dict[int, Job] = field(default_factory=dict)  # every job the snapshot mentions, by id
    evicting: set[int] = field(default_factory=set)
    # job id -> the pending job its eviction makes room for (the latest preemption that chose it)
    evicting_for: dict[int, int] = field(default_factory=dict)
    # clusters whose nodes this cycle may not use, with why (unreachable, inventory not synced yet)
    unavailable_clusters: dict[str, str] = field(default_factory=dict)
    # flavors with at least one node on a cluster this cycle may use
    available_flavors: set[str] = field(default_factory=set)
    # (cluster, flavor) pairs with at least one node this cycle may use, and every cluster's labels
    available_pairs: set[tuple[str, str]] = field(default_factory=set)
    cluster_labels: dict[str, dict] = field(default_factory=dict)
    # runtime seconds per wall-clock second of each cluster (1 but for a sped-up simulated cluster), and the
    # default cluster's, for jobs not bound to a cluster yet
    speedup: dict[str, float] = field(default_factory=dict)
    default_speedup: float = 1.0
    predicted: dict[int, float | None] = field(default_factory=dict)  # job id -> predicted run time (runtime s)
    # The engine's roles of the jobs of more than one role (read in one query, only when there are such jobs)
    roles: dict[int, tuple[core.Role, ...]] = field(default_factory=dict)
    # The teams with a quota split, by id -> slug (a job of another team, or of none, is the engine's team "")
    teams: dict[int, str] = field(default_factory=dict)
    # CPU work on GPU nodes: per cluster that allows it, its setting, and its GPU nodes by name (the rows read)
    gpu_hosts: dict[str, tuple[Cluster, dict[str, list[Node]]]] = field(default_factory=dict)

    def predicted_wall(self, job_id: int, cluster: str | None = None, *, routed: bool = False) -> float | None:
        """The job's predicted run time on the wall clock, None when right-sizing knows none."""
        p = self.predicted.get(job_id)
        return None if p is None else self.wall_seconds(p, cluster, routed=routed)

    def wall_seconds(self, seconds: float, cluster: str | None = None, *, routed: bool = False) -> float:
        """``seconds`` of a job's runtime as seconds of the wall on ``cluster`` (None: the default one).
        ``routed``: a session or service, whose time is the wall's on every cluster (``speedup_of``)."""
        if routed:
            return float(seconds)
        speedup = self.default_speedup if cluster is None else self.speedup.get(cluster, self.default_speedup)
        return float(seconds) / speedup


def build_snapshot(*, now: datetime, rows: JobRows | None = None) -> tuple[core.Snapshot, SnapshotContext]:
    """The world as the engine sees it, in a fixed number of queries, and the rows it came from. ``rows``: the
    cycle worker's kept job rows (``job_rows``), else every job is read in full."""
    policy, version = current_policy()
    ctx = SnapshotContext(now=now, policy_version=version)
    nodes, clusters = read_nodes(ctx)
    quotas = read_quotas()
    team_quotas = read_team_quotas(ctx)
    active, queued = rows.read() if rows is not None else read_uncached()
    mark_evicting(ctx, active)
    ctx.roles = read_roles([j for j in (*active, *queued) if j.role_count > 1])
    # right-sizing's predicted run times, for the start estimates (one query; none without right-sizing)
    ctx.predicted = ports.sizing().predicted_runtimes((j.pk, j.owner_id, j.name, j.image) for j in (*active, *queued))
    budget = read_for_cycle()  # one consistent read of the holds and the credits they draw on
    credits = team_credits(ctx, budget)  # (before the jobs are read: a team with a share of the budget is named)
    running, disruption = running_jobs(ctx, active, any_queued=bool(queued))
    nodes += spare_cpu_nodes(ctx, active)

    # Where each queued job's data sources are (one read for all of them; none when no job mounts any).
    sources = source_clusters((j.pk, j.department_id, j.mounts or [], j.checkpoint or {}) for j in queued)
    after, ended = read_dependencies([j.pk for j in queued if j.has_dependencies])
    pending = pending_jobs(queued, budget=budget, sources=sources, after=after, ctx=ctx,
                           memo=rows.pending if rows is not None else None)

    team_usage: dict[tuple[str, str], float] = {}
    bookings, maintenance = engine_calendar(now)
    if ctx.gpu_hosts:
        maintenance = tuple(closing_twins(w, ctx) for w in maintenance)
    window_start = now - timedelta(seconds=policy.preemption_window_s)
    recent = PreemptionVictim.objects.filter(preemption__decided_at__gte=window_start).count()

    snapshot = core.Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        running=tuple(running),
        pending=tuple(pending),
        quotas=quotas,
        policy=policy,
        credits=credits,
        usage=decayed_usage(now=now, half_life_s=policy.usage_half_life_s, teams=ctx.teams, by_team=team_usage),
        disruption_budgets=tuple(disruption),
        recent_preemptions=recent,
        clusters=clusters,
        namespace_quotas=read_namespace_quotas(now),
        user_limits=tuple(core.UserLimit(d, u, g) for d, u, g in quota_selectors.user_limits_in_force()),
        ended=ended,
        team_quotas=team_quotas,
        team_usage=team_usage,
        bookings=bookings,
        maintenance=maintenance,
    )
    return snapshot, ctx


def read_dependencies(job_ids: list[int]) -> tuple[dict[int, tuple[core.Dependency, ...]], dict[int, str]]:
    """The dependencies of these queued jobs as the engine's (an array's: every one of its tasks), and how the
    jobs they name ended, for those that did (two queries; none without ``job_ids``)."""
    if not job_ids:
        return {}, {}
    rows = list(JobDependency.objects.filter(job_id__in=job_ids).order_by("job_id", "id")
                .values_list("job_id", "condition", "on_job_id", "on_array_id"))
    arrays = {a for _, _, _, a in rows if a is not None}
    named = {j for _, _, j, _ in rows if j is not None}
    tasks: dict[int, list[int]] = defaultdict(list)
    ended: dict[int, str] = {}
    for pk, array_id, state in (Job.objects.filter(Q(pk__in=named) | Q(array_id__in=arrays))
                                .order_by("pk").values_list("pk", "array_id", "state")):
        if array_id in arrays:
            tasks[array_id].append(pk)
        if state in FINAL_STATES:
            ended[pk] = state
    after: dict[int, list[core.Dependency]] = defaultdict(list)
    for job_id, condition, on_job, on_array in rows:
        ids = (on_job,) if on_job is not None else tuple(tasks.get(on_array, ()))
        label = f"job {on_job}" if on_job is not None else f"array {on_array}"
        after[job_id].append(core.Dependency(condition=condition, job_ids=ids, label=label))
    return {k: tuple(v) for k, v in after.items()}, ended


def read_namespace_quotas(now) -> tuple[core.NamespaceQuotaLimit, ...]:
    """The namespace quotas that refused a request and have not changed since (one query)."""
    refusals = NamespaceQuotaRefusal.objects.filter(cleared_at__isnull=True, expires_at__gt=now).values_list(
        "cluster__name", "job__department__slug", "job__flavor__name", "total_gpus", "expires_at")
    return tuple(sorted({core.NamespaceQuotaLimit(cluster=c, department=d, flavor=f, total_gpus=g, until=e.timestamp())
                         for c, d, f, g, e in refusals},
                        key=lambda q: (q.cluster, q.department, q.flavor, q.total_gpus, q.until)))


def read_roles(jobs: list[Job]) -> dict[int, tuple[core.Role, ...]]:
    """The roles of jobs of several roles, as the engine's (a role without GPUs on its CPU pool, one with on the
    job's flavor); one query, none when no such job is given."""
    if not jobs:
        return {}
    flavor_of = {j.pk: j.flavor.name for j in jobs}
    out: dict[int, list[core.Role]] = {}
    work: dict[int, dict[int, tuple[int, int]]] = {}
    for r in JobRole.objects.filter(job_id__in=list(flavor_of)).select_related("flavor").order_by("job_id", "index"):
        out.setdefault(r.job_id, []).append(core.Role(
            r.name, r.pods, r.gpus_per_pod, r.cpu_millicores, r.memory_mib,
            flavor_of[r.job_id] if r.gpus_per_pod or r.flavor is None else r.flavor.name))
        if r.gpus_per_pod == 0 and r.flavor_id is not None:
            c, m = work.setdefault(r.job_id, {}).get(r.flavor_id, (0, 0))
            work[r.job_id][r.flavor_id] = (c + r.pods * r.cpu_millicores, m + r.pods * r.memory_mib)
    for j in jobs:  # (their CPU work, for the holds: no query per job)
        j._cpu_work = tuple((f, c, m) for f, (c, m) in sorted(work.get(j.pk, {}).items()))
    return {k: tuple(v) for k, v in out.items()}


def engine_roles(j: Job, ctx: SnapshotContext) -> tuple[core.Role, ...]:
    """The engine's roles of a job: none for a job of one role with GPUs (its own columns say it all, as before
    roles), its one role for a CPU-only job of one role, else its rows."""
    if j.role_count > 1:
        return ctx.roles.get(j.pk, ())
    if j.gpus_per_pod == 0:
        return (core.Role("main", j.pods, 0, j.cpu_millicores, j.memory_mib, j.flavor.name),)
    return ()


def split_placement(roles: tuple[core.Role, ...], placement: tuple[str, ...]
                    ) -> tuple[tuple[str, ...], tuple[tuple[str, str, int, int], ...]]:
    """A job's stored placement (every pod, role by role) as its GPU pods' nodes and its CPU pods (flavor, node,
    millicores, MiB)."""
    gpu: list[str] = []
    cpu: list[tuple[str, str, int, int]] = []
    at = 0
    for r in roles:
        nodes = placement[at:at + r.pods]
        at += r.pods
        if r.gpus_per_pod:
            gpu += nodes
        else:
            cpu += [(r.flavor, n, r.cpu_m, r.memory_mib) for n in nodes]
    return tuple(gpu), tuple(cpu)


def read_nodes(ctx: SnapshotContext) -> tuple[tuple[core.Node, ...], tuple[core.ClusterInfo, ...]]:
    """Every node and cluster; a node of a cluster the cycle may not use now is unschedulable (``ctx`` says
    which clusters, why, and which flavors and (cluster, flavor) pairs remain)."""
    cluster_rows = {c.pk: c for c in Cluster.objects.select_related("cpu_on_gpu_nodes").order_by("name")}
    node_rows = list(Node.objects.select_related("flavor"))
    for n in node_rows:  # the rows just read, not one query per node
        n.cluster = cluster_rows[n.cluster_id]
    for n in node_rows:
        if n.cluster.name not in ctx.unavailable_clusters:
            why = cluster_unavailable(n.cluster)
            if why:
                ctx.unavailable_clusters[n.cluster.name] = why
    nodes = tuple(
        core.Node(
            name=n.name,
            flavor=n.flavor.name,
            gpus=n.gpus,
            used_by_others=n.used_by_others,
            cluster=n.cluster.name,
            labels=tuple(sorted((str(k), str(v)) for k, v in (n.labels or {}).items())),
            taints=tuple(sorted(str(t) for t in (n.taints or []))),
            schedulable=n.schedulable and n.cluster.name not in ctx.unavailable_clusters,
            kind=n.flavor.kind,
            cpu_m=n.cpu_millicores,
            memory_mib=n.memory_mib,
        )
        for n in node_rows
    )
    for n in node_rows:
        c = n.cluster
        if c.cpu_on_gpu_nodes_id is not None and n.flavor.kind != CPU_KIND and c.name not in ctx.unavailable_clusters:
            ctx.gpu_hosts.setdefault(c.name, (c, {}))[1].setdefault(n.name, []).append(n)
    ctx.available_flavors = {n.flavor for n in nodes if n.cluster not in ctx.unavailable_clusters}
    ctx.available_pairs = {(n.cluster, n.flavor) for n in nodes if n.cluster not in ctx.unavailable_clusters}
    for name, (c, _) in ctx.gpu_hosts.items():  # the pool runs there even without a node of its own
        ctx.available_flavors.add(c.cpu_on_gpu_nodes.name)
        ctx.available_pairs.add((name, c.cpu_on_gpu_nodes.name))
    ctx.cluster_labels = {c.name: dict(c.labels or {}) for c in cluster_rows.values()}
    ctx.speedup = {c.name: _speedup(c) for c in cluster_rows.values()}
    default = next((c.name for c in cluster_rows.values() if c.is_default), core.DEFAULT_CLUSTER)
    ctx.default_speedup = ctx.speedup.get(default, 1.0)
    return nodes, cluster_infos(cluster_rows.values())


# A GPU node's spare CPU offered to a CPU pool is the engine's node ``<name>+cpu`` of that pool: a name of its own,
# because the engine keys some of its books by node name alone (the FIFO baseline's free GPUs), where the GPU
# node and its CPU twin would overwrite each other. "+" is never in a Kubernetes node name, so the twin's name
# cannot be a real node's; the placements applied name the real node (``host_name``).
GPU_HOST_SUFFIX = "+cpu"


def host_name(node: str) -> str:
    """The real node a placement's node stands for (a GPU node's CPU twin is that GPU node)."""
    return node.removesuffix(GPU_HOST_SUFFIX)


def closing_twins(window: core.MaintenanceWindow, ctx: SnapshotContext) -> core.MaintenanceWindow:
    """A window that names GPU nodes names their CPU twins too: a node in maintenance lends no spare CPU. (A
    window selecting by labels closes the twins already: they carry their GPU node's labels.)"""
    hosts = ctx.gpu_hosts.get(window.cluster, (None, {}))[1]
    twins = tuple(n + GPU_HOST_SUFFIX for n in window.nodes if n in hosts)
    return replace(window, nodes=window.nodes + twins) if twins else window


def on_gpu_node(ctx: SnapshotContext, cluster: str, flavor: str, node: str) -> str:
    """The engine's node of a running CPU pod of ``flavor`` stored on ``node``: the GPU node's CPU twin when the
    pod runs on a GPU node of a cluster that lends it to that pool, else ``node``."""
    c, hosts = ctx.gpu_hosts[cluster]
    if c.cpu_on_gpu_nodes.name == flavor and node in hosts:
        return node + GPU_HOST_SUFFIX
    return node


def spare_cpu_nodes(ctx: SnapshotContext, active: list[Job]) -> tuple[core.Node, ...]:
    """Each GPU node of a cluster that lends its GPU nodes to a CPU pool, as a node of that pool offering the
    node's allocatable CPU and memory minus what the GPU pods placed there request, minus the cluster's reserve
    for every GPU of the node those pods do not hold (free, or held by pods the portal does not own): CPU work
    never takes what a GPU job admitted there later needs. The CPU pods already there are the engine's to count
    (their ``cpu_pods``), as on any node of the pool. A node whose cores are unknown (0) offers nothing."""
    if not ctx.gpu_hosts:
        return ()
    held: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0])  # (cluster, node) -> GPUs, m, MiB
    for j in active:
        cluster = j.cluster.name if j.cluster else core.DEFAULT_CLUSTER
        if cluster not in ctx.gpu_hosts:
            continue
        roles = engine_roles(j, ctx) or (core.Role("main", j.pods, j.gpus_per_pod, j.cpu_millicores,
                                                   j.memory_mib + j.shm_mb, j.flavor.name),)
        at, placement = 0, tuple(j.placement or ())
        # (a fraction's pod holds its share of one GPU: the rest of that GPU keeps its share of the reserve)
        share = j.share_milli / 1000 if j.share_milli else 1
        for r in roles:
            for node in placement[at:at + r.pods]:
                if r.gpus_per_pod:
                    h = held[(cluster, node)]
                    h[0] += r.gpus_per_pod * share
                    h[1] += r.cpu_m
                    h[2] += r.memory_mib
            at += r.pods
    out = []
    for cluster, (c, hosts) in sorted(ctx.gpu_hosts.items()):
        for name, rows in sorted(hosts.items()):
            first = rows[0]  # (a node of two GPU flavors is one machine: its cores counted once)
            gpus = sum(n.gpus for n in rows)
            cpu, mem = max(n.cpu_millicores for n in rows), max(n.memory_mib for n in rows)
            used_gpus, used_cpu, used_mem = held.get((cluster, name), (0, 0, 0))
            free_gpus = max(0.0, gpus - used_gpus)
            spare_cpu = int(cpu - used_cpu - math.ceil(free_gpus * c.gpu_reserve_cores * 1000))
            spare_mem = int(mem - used_mem - math.ceil(free_gpus * c.gpu_reserve_memory_gib * 1024))
            if cpu <= 0 or spare_cpu <= 0 or spare_mem <= 0:
                continue
            out.append(core.Node(
                name=name + GPU_HOST_SUFFIX, flavor=c.cpu_on_gpu_nodes.name, gpus=0, cluster=cluster,
                labels=tuple(sorted((str(k), str(v)) for k, v in (first.labels or {}).items())),
                taints=tuple(sorted({str(t) for n in rows for t in (n.taints or [])})),
                schedulable=all(n.schedulable for n in rows), kind=CPU_KIND, cpu_m=spare_cpu, memory_mib=spare_mem,
            ))
    return tuple(out)


def _speedup(cluster) -> float:
    """How much faster than the wall clock the cluster's own clock runs (the simulated one in the demo); 1 for a
    real cluster, and for one whose backend cannot be built now (no kubeconfig yet): the cycle goes on without
    it, as it does for an unreachable cluster, rather than stopping for every cluster."""
    return speedup_of(cluster)


# A quota row of a CPU pool counts cores or GiB; the engine counts millicores and MiB under the pool's keys.
RESOURCE_UNITS = {"cpu": 1000, "memory": 1024}


def read_quotas() -> tuple[core.Quota, ...]:
    def scaled(value, resource):
        return None if value is None else value * RESOURCE_UNITS.get(resource, 1)

    return tuple(
        core.Quota(
            department=q.department.slug,
            flavor=q.flavor.name if q.resource == "gpus" else resource_key(q.flavor.name, q.resource),
            nominal=scaled(q.nominal, q.resource),
            borrowing_limit=scaled(q.borrowing_limit, q.resource),
            lending_limit=scaled(q.lending_limit, q.resource),
            cluster=q.cluster.name if q.cluster_id else None,
        )
        for q in quota_selectors.quotas_in_force()
    )


def read_team_quotas(ctx: SnapshotContext) -> tuple[core.TeamQuota, ...]:
    """The teams' quota splits (one query), and in ``ctx.teams`` the slug of each team that has one."""
    out = []
    for team_id, dept, team, flavor, nominal, borrowing, lending in quota_selectors.team_quotas_in_force():
        ctx.teams[team_id] = team
        out.append(core.TeamQuota(dept, team, flavor, nominal, borrowing, lending))
    return tuple(out)


def team_credits(ctx: SnapshotContext, budget) -> dict[str, int] | None:
    """The departments' available credits and, for each team with a share of its department's budget, what the
    share leaves (the share less its jobs' open holds) under the team's account; such a team is named on its
    jobs (``ctx.teams``) even without a quota split."""
    credits = budget.available_credits()
    if credits is None or not budget.team_limits:
        return credits
    team_of = dict(Job.objects.filter(pk__in=list(budget.open_holds)).values_list("pk", "team_id"))
    held: dict[int | None, int] = {}
    for job_id, amount in budget.open_holds.items():
        team = team_of.get(job_id)
        held[team] = held.get(team, 0) + amount
    for team_id, department, team, limit in budget.team_limits:
        credits[account(department, team)] = limit - held.get(team_id, 0)
        ctx.teams.setdefault(team_id, team)
    return credits


def mark_evicting(ctx: SnapshotContext, active: list[Job]) -> None:
    """Victims in flight: decided, requested or accepted, their pods not yet gone (their jobs stay active until
    then, so their GPUs still count as used). Each is credited to its preemptor, which waits for them
    instead of choosing more victims; the latest preemption that chose a job wins (total order by id)."""
    attempts = {j.pk: j.attempt for j in active}
    for job_id, attempt, preemptor_id in PreemptionVictim.objects.filter(
        job__state__in=(JobState.ADMITTED, JobState.RUNNING),
        status__in=IN_FLIGHT,
    ).order_by("preemption_id", "id").values_list("job_id", "attempt", "preemption__preemptor_id"):
        if attempts.get(job_id) == attempt:
            ctx.evicting.add(job_id)
            if preemptor_id is not None:
                ctx.evicting_for[job_id] = preemptor_id


def running_jobs(
    ctx: SnapshotContext, active: list[Job], *, any_queued: bool
) -> tuple[list[core.RunningJob], list[core.DisruptionBudget]]:
    """The active jobs as the engine's running jobs, with the disruption budgets covering them: the clusters'
    own (asked only when some job waits and some active one could be a victim), else a job's own
    ``pdb_min_available``."""
    coverage = (
        cluster_pdbs(active)
        if any_queued and any(tiers.is_preemptible(j.tier, j.preemptible) and j.pk not in ctx.evicting for j in active)
        else {}
    )
    running = []
    disruption: list[core.DisruptionBudget] = [b for cov in coverage.values() for b in cov.pdbs]
    for j in active:
        ctx.jobs[j.pk] = j
        cluster = j.cluster.name if j.cluster else core.DEFAULT_CLUSTER
        pdbs: tuple[str, ...] = ()
        if cluster in coverage:
            pdbs = coverage[cluster].jobs.get((j.pk, j.attempt), ())
        elif j.pdb_min_available is not None:
            pdbs = (f"job-{j.pk}",)
            disruption.append(
                core.DisruptionBudget(name=pdbs[0], disruptions_allowed=max(0, j.size - j.pdb_min_available))
            )
        running.append(running_job(j, ctx, cluster=cluster, pdbs=pdbs))
    return running, disruption


def running_job(j: Job, ctx: SnapshotContext, *, cluster: str, pdbs: tuple[str, ...]) -> core.RunningJob:
    roles = engine_roles(j, ctx)
    # (a resizable job is of one role: ``held_placement`` is the larger of its two sizes while one is under way)
    placement, cpu_pods = split_placement(roles, tuple(j.placement or ())) if roles else (held_placement(j), ())
    if cpu_pods and cluster in ctx.gpu_hosts:
        cpu_pods = tuple((f, on_gpu_node(ctx, cluster, f, n), c, m) for f, n, c, m in cpu_pods)
    return core.RunningJob(
        id=j.pk,
        department=j.department.slug,
        flavor=j.flavor.name,
        tier=j.tier,
        placement=placement,
        cpu_pods=cpu_pods,
        gpus_per_pod=j.gpus_per_pod,
        share=share_of(j) if j.share_milli else None,
        devices=tuple(j.gpu_devices or ()),
        started_at=to_epoch(j.started_at or j.admitted_at) or ctx.now.timestamp(),
        max_runtime_s=ctx.wall_seconds(j.max_runtime_s, cluster, routed=j.has_route),
        checkpoint_interval_s=(ctx.wall_seconds(j.checkpoint_interval_s, cluster, routed=j.has_route)
                               if j.checkpoint_interval_s else None),
        borrowed=j.borrowed,
        urgency=j.urgency,
        user_tier=j.user_tier,
        submitted_at=to_epoch(j.submitted_at),
        bid=j.bid,
        cluster=cluster,
        deadline=to_epoch(j.deadline),
        disruption_budgets=pdbs,
        # (a CPU-only job frees no GPU: it is never a victim)
        preemptible=tiers.is_preemptible(j.tier, j.preemptible) and j.pk not in ctx.evicting and bool(placement),
        own_preemptible=j.preemptible,
        evicting_for=ctx.evicting_for.get(j.pk),
        user=j.owner.username,
        array_id=j.array_id,
        predicted_runtime_s=ctx.predicted_wall(j.pk, cluster, routed=j.has_route),
        team=ctx.teams.get(j.team_id, ""),
        # A resizable job: its range, and whether a resize decided earlier still waits for its checkpoint or its
        # pods (the engine then decides nothing new for it)
        min_pods=j.min_pods if j.min_pods is not None and not roles else None,
        max_pods=j.pods if j.min_pods is not None and not roles else None,
        resizing=bool(j.resize),
    )


def pending_jobs(queued: list[Job], *, budget, sources: dict, after: dict, ctx: SnapshotContext,
                 memo: dict | None) -> list[core.PendingJob]:
    """The queued jobs as the engine's pending jobs. ``memo`` (the kept rows' own): each kept job's pending
    job by everything it is made of, its row's version and what is not its row (hold, data sources,
    dependencies, predicted run time, speed-up, names, throttle): one that none of them changed since the
    last cycle is the one made then, not made again for every waiting job every cycle."""
    out, made = [], {}
    for j in queued:
        ctx.jobs[j.pk] = j
        hold, data_sources, deps = budget.hold_for(j), sources.get(j.pk, ()), after.get(j.pk, ())
        version = getattr(j, "v", None)  # a kept row's version (none: read in full, nothing to compare)
        key = (version, hold, data_sources, deps, ctx.predicted.get(j.pk), ctx.default_speedup, j.department.slug,
               j.flavor.name, j.owner.username, j.array.throttle if j.array_id else None, ctx.teams.get(j.team_id, ""))
        last = memo.get(j.pk) if memo is not None and version is not None else None
        p = last[1] if last is not None and last[0] == key else pending_job(
            j, hold=hold, data_sources=data_sources, ctx=ctx, after=deps)
        if version is not None:
            made[j.pk] = (key, p)
        out.append(p)
    if memo is not None:
        memo.clear()
        memo.update(made)
    return out


def pending_job(j: Job, *, hold: int, ctx: SnapshotContext, data_sources: tuple = (),
                after: tuple[core.Dependency, ...] = ()) -> core.PendingJob:
    roles = engine_roles(j, ctx)
    return core.PendingJob(
        id=j.pk,
        department=j.department.slug,
        flavor=j.flavor.name,
        tier=j.tier,
        pods=j.pods if j.gpus_per_pod else 0,  # the GPU gang; a CPU-only job's pods are its roles'
        gpus_per_pod=j.gpus_per_pod,
        share=share_of(j) if j.share_milli else None,
        roles=roles,
        urgency=j.urgency,
        user_tier=j.user_tier,
        user=j.owner.username,
        submitted_at=to_epoch(j.submitted_at),
        deadline=to_epoch(j.deadline),
        max_runtime_s=ctx.wall_seconds(j.max_runtime_s, routed=j.has_route),
        bid=j.bid,
        hold=hold,
        attempt=j.attempt,
        cluster_selector=label_pairs(j.cluster_selector),
        cluster_preference=label_pairs(j.cluster_preference),
        topology_level=j.topology_level,
        topology_required=j.topology_required,
        data_sources=data_sources,
        not_before=to_epoch(j.not_before),
        expedited_since=to_epoch(j.expedited_at),
        team=ctx.teams.get(j.team_id, ""),
        own_preemptible=j.preemptible,
        held=j.held_at is not None,
        after=after,
        array_id=j.array_id,
        array_throttle=j.array.throttle if j.array_id else None,
        predicted_runtime_s=ctx.predicted_wall(j.pk, routed=j.has_route),
        # a resizable job is judged at the largest size of its range that fits now (``engine.resize``)
        min_pods=j.min_pods if j.min_pods is not None and j.gpus_per_pod and not roles else None,
    )


def label_pairs(labels) -> tuple[tuple[str, str], ...]:
    """A stored label mapping as the core's sorted (key, value) pairs."""
    return tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))


def cluster_infos(rows) -> tuple[core.ClusterInfo, ...]:
    """Cluster rows as the engine sees them: labels, state (cordoned and draining take nothing new), cost rank."""
    return tuple(
        core.ClusterInfo(name=c.name, labels=label_pairs(c.labels), state=c.state, cost_rank=c.cost_rank,
                         topology_levels=tuple(c.topology_levels or ()))
        for c in rows
    )


def cluster_unavailable(cluster) -> str:
    """Why a cycle may not place jobs on this cluster's nodes now ("" when it may): its API is unreachable,
    or its inventory comes from the cluster and has not been read since this process started."""
    if not cluster.reachable:
        return f"cluster {cluster.name} is unreachable" + (f": {cluster.last_error[:200]}" if cluster.last_error
                                                           else "")
    if owns_inventory(cluster) and (cluster.last_sync_at is None or cluster.last_sync_at < PROCESS_STARTED):
        return f"cluster {cluster.name}'s nodes have not been read from it yet since the portal started"
    return ""


def cluster_pdbs(active: list[Job]) -> dict[str, PdbCoverage]:
    """The disruption budgets of each reachable cluster that runs active jobs and has budgets of its own, by
    cluster name; budget names are qualified by the cluster unless it is the default one. Asked every cycle
    (a budget's room changes with every eviction and every pod that becomes ready); a cluster whose API fails
    is left out (its jobs fall back to their own ``pdb_min_available``) and logged."""
    reachable: dict[str, bool] = {}
    rows: dict[str, object] = {}
    for j in active:
        name = j.cluster.name if j.cluster else core.DEFAULT_CLUSTER
        reachable[name] = reachable.get(name, True) and (j.cluster.reachable if j.cluster else True)
        if j.cluster:
            rows[name] = j.cluster  # the row already read: no query to find its backend
    out: dict[str, PdbCoverage] = {}
    for name, ok in sorted(reachable.items()):
        if not ok:
            continue
        try:
            cov = get_backend(rows.get(name, name)).pdb_coverage()
        except BackendError as exc:
            log.warning("cluster %s: disruption budgets unavailable this cycle (%s); using the jobs' own", name, exc)
            continue
        if cov is None:
            continue
        if name != core.DEFAULT_CLUSTER:
            qualify = f"{name}:".__add__
            cov = PdbCoverage(
                pdbs=tuple(replace(b, name=qualify(b.name)) for b in cov.pdbs),
                jobs={k: tuple(map(qualify, v)) for k, v in cov.jobs.items()},
            )
        out[name] = cov
    return out


def decayed_usage(*, now: datetime, half_life_s: float, teams: dict[int, str] | None = None,
                  by_team: dict[tuple[str, str], float] | None = None) -> dict[str, float]:
    """GPU-seconds per department, each second weighted 2^(-age/half_life) (fair share remembers the past);
    with ``teams`` (team id -> slug), the GPU-seconds of each of those teams' jobs go into ``by_team`` too, by
    (department, team), for the fair-share tree.

    Looks back four half-lives (older usage weighs < 1/16) in one query. On PostgreSQL the database sums each
    job's weighted interval per department and team, with the same arithmetic in the same order as below (in
    double precision): the rows read no longer grow with the jobs that ran in those four half-lives (a week's
    worth by default, read every cycle: 15,000 rows by the end of a 15,000-job run).
    """
    horizon = now - timedelta(seconds=4 * half_life_s)
    rows = Job.objects.filter(started_at__isnull=False).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=horizon)
    )
    lam = math.log(2) / half_life_s
    t_now = now.timestamp()
    usage: dict[str, float] = defaultdict(float)
    for dept, team_id, seconds in _weighted_seconds(rows, lam=lam, t_now=t_now, since=horizon.timestamp()):
        usage[dept] += seconds
        if teams and by_team is not None and team_id in teams:
            key = (dept, teams[team_id])
            by_team[key] = by_team.get(key, 0.0) + seconds
    return dict(usage)


def _epoch(field: str) -> Func:
    return Func(F(field), template="EXTRACT(EPOCH FROM %(expressions)s)::float8", output_field=FloatField())


def _weighted_seconds(rows, *, lam: float, t_now: float, since: float):
    """(department slug, team id, GPU-seconds weighted by age) of the jobs of ``rows``, per job, or per
    department and team on PostgreSQL: the integral of exp(-lam * (now - t)) dt over each job's run since
    ``since``."""
    if connection.vendor == "postgresql":
        start = Greatest(_epoch("started_at"), Value(since, output_field=FloatField()))
        end = Coalesce(_epoch("finished_at"), Value(t_now, output_field=FloatField()))
        weighted = Cast(GPU_SHARE, FloatField()) * (
            Exp(Value(-lam) * (Value(t_now) - F("b"))) - Exp(Value(-lam) * (Value(t_now) - F("a")))) / Value(lam)
        yield from (rows.alias(a=start, b=end).filter(b__gt=F("a")).order_by()
                    .values_list("department__slug", "team_id").annotate(s=Sum(weighted)))
        return
    for dept, total_gpus, started, finished, team_id in rows.values_list(
            "department__slug", GPU_SHARE, "started_at", "finished_at", "team_id"):
        a = max(started.timestamp(), since)
        b = finished.timestamp() if finished else t_now
        if b <= a:
            continue
        yield dept, team_id, total_gpus * (math.exp(-lam * (t_now - b)) - math.exp(-lam * (t_now - a))) / lam
