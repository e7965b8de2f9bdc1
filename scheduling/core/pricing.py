"""The price of borrowed capacity in one cycle (pure): a uniform clearing price per flavor."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping

from .quota import QuotaBook
from .topology import Topology
from .types import PendingJob


def clearing_prices(
    pending: Iterable[PendingJob],
    admitted: Container[int],
    credits: Mapping[str, int] | None,
    quota: QuotaBook,
    topology: Topology,
) -> dict[str, int]:
    """The highest bid that lost, per flavor: of a job left pending that would have had to borrow, could have
    borrowed (its department's borrowing limit and the ``credits`` it had at the start of the cycle allow it)
    and asked for a flavor that exists. Losers are judged on the cycle's final quota use, so for a given set
    of winners the price does not depend on the order in which the jobs were considered: a winner that bid at
    least the price pays the same whatever it bid. A winner never pays more than its own bid (the caller caps
    each admission); with no loser the borrowing is uncontested (no price: the adapter charges the base
    price)."""
    out: dict[str, int] = {}
    for job in pending:
        if job.id in admitted or job.bid <= out.get(job.flavor, 0):
            continue
        if job.pods < 1 or job.gpus_per_pod < 1 or job.flavor not in topology.known_flavors:
            continue
        if credits is not None and job.hold > credits.get(job.department, 0):
            continue
        dept, flavor, k = job.department, job.flavor, job.total_gpus
        # (per-cluster quotas: it could have borrowed on one of the clusters open to it)
        scoped = (dept, flavor) in quota.scoped
        if not any(
            quota.borrows(dept, flavor, k, c)
            and quota.never(dept, flavor, k, c) is None
            and quota.limit_code(dept, flavor, k, c) is None
            for c in ([p.cluster for p in topology.job_pools(job)[0]] if scoped else [None])
        ):
            continue
        out[flavor] = job.bid
    return dict(sorted(out.items()))
