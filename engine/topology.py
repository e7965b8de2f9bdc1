"""Where a job may run (pure): the schedulable nodes pooled per (cluster, flavor), the clusters with their
labels, state and cost rank, and which of those a job's pin, selector and preferences allow and favour.

The pools start with every GPU free; the cycle subtracts what its running jobs hold."""

from __future__ import annotations

import copy
from collections import defaultdict

from .domains import Domains
from .placement import Pool
from .shapes import CPU_KIND, CpuPool
from .types import ClusterInfo, PendingJob, Snapshot


class Topology:
    def __init__(self, snapshot: Snapshot):
        by_pool: dict[tuple[str, str], list] = defaultdict(list)
        by_cpu_pool: dict[tuple[str, str], list] = defaultdict(list)
        self.known_flavors: set[str] = set()
        self.cpu_flavors: set[str] = set()
        for node in snapshot.nodes:
            self.known_flavors.add(node.flavor)
            if node.kind == CPU_KIND:  # a CPU pool's node: no GPUs for the GPU pools to count
                self.cpu_flavors.add(node.flavor)
                by_cpu_pool[(node.cluster, node.flavor)].append(node)
            elif node.schedulable:
                by_pool[(node.cluster, node.flavor)].append(node)
        self.pools: dict[tuple[str, str], Pool] = {
            key: Pool(key[0], key[1], nodes) for key, nodes in sorted(by_pool.items())
        }
        self.cpu_pools: dict[tuple[str, str], CpuPool] = {
            key: CpuPool(key[0], key[1], nodes) for key, nodes in sorted(by_cpu_pool.items())
        }
        self.pools_by_flavor: dict[str, list[Pool]] = defaultdict(list)
        for (_, flavor), pool in sorted(self.pools.items()):
            self.pools_by_flavor[flavor].append(pool)

        # Clusters: listed ones with their labels, state and cost rank; any other cluster a node names is
        # active, unlabelled and of cost rank 0.
        self.clusters: dict[str, ClusterInfo] = {c.name: c for c in sorted(snapshot.clusters, key=lambda c: c.name)}
        for node in snapshot.nodes:
            if node.cluster not in self.clusters:
                self.clusters[node.cluster] = ClusterInfo(node.cluster)
        self.cluster_labels = {name: frozenset(c.labels) for name, c in self.clusters.items()}
        for (cluster, _), pool in self.pools.items():
            levels = self.clusters[cluster].topology_levels if cluster in self.clusters else ()
            if levels:
                labels = {n.name: dict(n.labels) for n in by_pool[(pool.cluster, pool.flavor)]}
                pool.domains = Domains(tuple(levels), [labels[name] for name in pool.names], pool.indexed, pool.size,
                                       pool.names)
        self.flavor_clusters: dict[str, set[str]] = defaultdict(set)
        for node in snapshot.nodes:
            self.flavor_clusters[node.flavor].add(node.cluster)
        self._pool_cache: dict[tuple, tuple[list[Pool], dict[str, str]]] = {}
        self._cpu_cache: dict[tuple, list[str]] = {}  # (the clusters' states never change within a cycle)

    def fork(self, pools: dict[tuple[str, str], Pool]) -> Topology:
        """The same clusters and labels over ``pools``, another cycle's copies of these pools (and copies of the
        CPU pools)."""
        other = copy.copy(self)
        other.pools = pools
        other.cpu_pools = {key: pool.fork() for key, pool in self.cpu_pools.items()}
        other.pools_by_flavor = defaultdict(list)
        for flavor, own in self.pools_by_flavor.items():
            other.pools_by_flavor[flavor] = [pools[(p.cluster, p.flavor)] for p in own]
        other._pool_cache = {key: ([pools[(p.cluster, p.flavor)] for p in found], closed)
                             for key, (found, closed) in self._pool_cache.items()}
        return other

    def selects(self, job: PendingJob, cluster: str) -> bool:
        """Whether the job's pin and every label of its selector allow ``cluster``."""
        if job.cluster not in (None, cluster):
            return False
        return not job.cluster_selector or self.cluster_labels[cluster].issuperset(job.cluster_selector)

    def matches(self, job: PendingJob, cluster: str) -> bool:
        """Whether ``job`` may run on ``cluster`` at all: its pin, every label of its selector, and every data
        source it mounts declared there."""
        return self.selects(job, cluster) and all(cluster in where for _, where in job.data_sources)

    def missing_sources(self, job: PendingJob) -> dict[str, list[str]]:
        """For each cluster the job's pin and selector allow: the sources it mounts that are not there."""
        return {c: [name for name, where in job.data_sources if c not in where]
                for c in sorted(self.clusters) if self.selects(job, c)}

    def open_to(self, job: PendingJob, cluster: str) -> bool:
        return self.matches(job, cluster) and self.clusters[cluster].state == "active"

    def job_pools(self, job: PendingJob) -> tuple[list[Pool], dict[str, str]]:
        """The pools of the job's flavor it may be admitted to (a matching cluster that is active), and the
        matching clusters with such a pool that are closed to admissions, with their state."""
        key = (job.flavor, job.cluster, job.cluster_selector, job.data_sources)
        hit = self._pool_cache.get(key)
        if hit is None:
            pools: list[Pool] = []
            closed: dict[str, str] = {}
            for pool in self.pools_by_flavor.get(job.flavor, ()):
                if not self.matches(job, pool.cluster):
                    continue
                state = self.clusters[pool.cluster].state
                if state == "active":
                    pools.append(pool)
                else:  # cordoned or draining: its running work stays, nothing new starts there
                    closed[pool.cluster] = state
            hit = self._pool_cache[key] = (pools, closed)
        return hit

    def cpu_clusters(self, job: PendingJob) -> list[str]:
        """The active clusters a CPU-only job may start on (every one that has a pool of its flavor and that its
        pin, selector and data sources allow), by rank then name."""
        key = ("cpu", job.flavor, job.cluster, job.cluster_selector, job.cluster_preference, job.data_sources)
        hit = self._cpu_cache.get(key)
        if hit is None:
            found = {c for c, fl in self.cpu_pools if fl == job.flavor and self.open_to(job, c)}
            hit = self._cpu_cache[key] = sorted(found, key=lambda c: (self.cluster_rank(job, c), c))
        return hit

    def cluster_rank(self, job: PendingJob, cluster: str) -> tuple[int, int]:
        """How a cluster ranks for a job before fit: more of its preferred labels first, then the cheaper."""
        pref = 0
        if job.cluster_preference:
            labels = self.cluster_labels[cluster]
            pref = sum(1 for pair in job.cluster_preference if pair in labels)
        return (-pref, self.clusters[cluster].cost_rank)

    def capacity_gpus(self) -> int:
        return sum(sum(p.size[i] for i in p.indexed) for p in self.pools.values())

    def free_gpus(self) -> int:
        return sum(p.now.free_total() for p in self.pools.values())
