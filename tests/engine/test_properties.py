"""Hypothesis property tests of the engine's invariants on random snapshots."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import reasons, schedule
from engine.policy import DEFAULT_POLICY
from engine.types import (
    CLUSTER_STATES,
    TIERS,
    URGENCIES,
    ClusterInfo,
    DisruptionBudget,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Snapshot,
)

NOW = 50_000.0
DEPTS = ("A", "B", "C")
FLAVORS = ("a100", "mig")
TIER_ORDER = ("realtime", "elastic", "backfill")
LABEL_SETS = ((), (("region", "eu"),), (("data", "imagenet"), ("region", "eu")), (("region", "us"),))
SELECTORS = ((), (), (), (("region", "eu"),), (("data", "imagenet"),), (("region", "us"),), (("gpu", "none"),))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def snapshots(draw, federated: bool = False):
    """Random snapshots; ``federated``: three clusters with labels, states and cost ranks, jobs with cluster
    selectors and preferences, and per-cluster quotas beside global ones."""
    nodes = []
    if federated:
        clusters = ("default", "east", "west")
    else:
        clusters = ("default", "east") if draw(st.integers(0, 3)) == 0 else ("default",)
    for flavor in FLAVORS:
        for i in range(draw(st.integers(1 if flavor == "a100" else 0, 4))):
            gpus = draw(st.sampled_from([1, 2, 4, 8]))
            nodes.append(
                Node(
                    name=f"{flavor}-{i}",  # the same name may exist in both clusters
                    flavor=flavor,
                    gpus=gpus,
                    used_by_others=draw(st.integers(0, 1)) if gpus > 1 else 0,
                    cluster=draw(st.sampled_from(clusters)),
                    labels=(("zone", draw(st.sampled_from("ab"))),),
                    schedulable=draw(st.booleans()) or draw(st.booleans()),
                    taints=("gpu-maint",) if draw(st.integers(0, 9)) == 0 else (),
                )
            )
    nodes = list({(n.cluster, n.flavor, n.name): n for n in nodes}.values())
    free = {(n.cluster, n.flavor, n.name): n.gpus - n.used_by_others for n in nodes}
    running = []
    next_id = 1000
    for _ in range(draw(st.integers(0, 16))):
        if not nodes:
            break
        first = draw(st.sampled_from(nodes))
        pods = draw(st.integers(1, 2))
        g = draw(st.integers(1, 4))
        same_pool = [n for n in nodes if (n.cluster, n.flavor) == (first.cluster, first.flavor)]
        members = [first] + [draw(st.sampled_from(same_pool)) for _ in range(pods - 1)]
        need = defaultdict(int)
        for n in members:
            need[(n.cluster, n.flavor, n.name)] += g
        if any(free[key] < need[key] for key in need):
            continue
        for key in need:
            free[key] -= need[key]
        names = [n.name for n in members]
        tier = draw(st.sampled_from(TIERS))
        running.append(
            RunningJob(
                id=next_id,
                department=draw(st.sampled_from(DEPTS)),
                flavor=first.flavor,
                cluster=first.cluster,
                tier=tier,
                placement=tuple(names),
                gpus_per_pod=g,
                started_at=NOW - draw(st.sampled_from([0, 60, 300, 900, 3600, 7200])),
                max_runtime_s=draw(st.sampled_from([600, 3600, 7200])),
                borrowed=draw(st.booleans()),
                urgency=draw(st.sampled_from(URGENCIES)),
                preemptible=tier != "realtime" and draw(st.integers(0, 5)) > 0,
                disruption_budgets=draw(st.sampled_from([(), (), ("pdb-a",), ("pdb-b",), ("pdb-a", "pdb-b")])),
                checkpoint_interval_s=draw(st.sampled_from([None, 300.0, 1800.0])),
            )
        )
        next_id += 1
    quotas = []
    for dept in DEPTS:
        for flavor in FLAVORS:
            for scope in (None, *clusters) if federated else (None,):
                if draw(st.integers(0, 5 if scope is None else 1)) == 0:
                    continue
                nominal = draw(st.integers(0, 12))
                quotas.append(
                    Quota(
                        dept,
                        flavor,
                        nominal,
                        draw(st.one_of(st.none(), st.integers(0, 8))),
                        draw(st.one_of(st.none(), st.integers(0, nominal))),
                        scope,
                    )
                )
    pending = []
    for i in range(draw(st.integers(0, 14))):
        pending.append(
            PendingJob(
                id=i + 1,
                department=draw(st.sampled_from(DEPTS)),
                flavor=draw(st.sampled_from(FLAVORS + ("h100",))) if draw(st.integers(0, 9)) == 0
                else draw(st.sampled_from(FLAVORS)),
                tier=draw(st.sampled_from(TIERS + ("realtime",))),
                pods=draw(st.integers(1, 3)),
                gpus_per_pod=draw(st.sampled_from([1, 1, 2, 4, 8])),
                urgency=draw(st.sampled_from(URGENCIES)),
                # up to two days: some jobs starve (the guard changes the order and the drain rules)
                submitted_at=NOW - draw(st.sampled_from([0, 600, 3600, 7200, 50_000, 172_800])),
                max_runtime_s=draw(st.sampled_from([300, 1800, 3600, 14400])),
                bid=draw(st.integers(0, 500)),
                hold=draw(st.sampled_from([0, 0, 100, 1000])),
                cluster=draw(st.sampled_from((None, None, None, "east"))),
                cluster_selector=draw(st.sampled_from(SELECTORS)) if federated else (),
                cluster_preference=draw(st.sampled_from(SELECTORS)) if federated else (),
            )
        )
    credits = draw(st.one_of(st.none(), st.fixed_dictionaries({d: st.integers(0, 2000) for d in DEPTS})))
    policy = replace(
        DEFAULT_POLICY,
        min_runtime_s=draw(st.sampled_from([60.0, 600.0, 1200.0])),
        preemption_rate_limit=draw(st.integers(0, 4)),
        priority_band_weight=draw(st.sampled_from([0.0, 0.0, 2.0, 4.0])),  # the invariants hold with a band too
    )
    infos = ()
    if federated:
        infos = tuple(
            ClusterInfo(
                name,
                draw(st.sampled_from(LABEL_SETS)),
                draw(st.sampled_from(CLUSTER_STATES + ("active", "active"))),
                draw(st.integers(0, 2)),
            )
            for name in clusters
            if draw(st.integers(0, 4)) > 0  # sometimes unlisted: active, unlabelled
        )
    return Snapshot(
        clusters=infos,
        now=NOW,
        nodes=tuple(nodes),
        running=tuple(running),
        pending=tuple(pending),
        quotas=tuple(quotas),
        policy=policy,
        credits=credits,
        usage={d: draw(st.floats(0, 1e6)) for d in DEPTS},
        disruption_budgets=(DisruptionBudget("pdb-a", draw(st.integers(0, 2))), DisruptionBudget("pdb-b", 1)),
        recent_preemptions=draw(st.integers(0, 2)),
    )


def _usage(snapshot):
    usage = defaultdict(int)
    for job in snapshot.running:
        usage[(job.department, job.flavor)] += job.total_gpus
    return usage


@SETTINGS
@given(snapshots())
def test_every_pending_job_is_admitted_or_explained_exactly_once(snap):
    res = schedule(snap)
    ids = [a.job_id for a in res.admissions] + [r.job_id for r in res.pending]
    assert sorted(ids) == sorted(j.id for j in snap.pending)
    assert all(r.code in reasons.CODES and "\n" not in r.message for r in res.pending)


@SETTINGS
@given(snapshots())
def test_no_node_over_committed_and_gangs_whole(snap):
    res = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    nodes = {(n.cluster, n.flavor, n.name): n for n in snap.nodes}
    used = defaultdict(int)
    for r in snap.running:
        for name in r.placement:
            used[(r.cluster, r.flavor, name)] += r.gpus_per_pod
    for a in res.admissions:
        job = jobs[a.job_id]
        assert len(a.placement) == job.pods  # a gang is never partly admitted
        for name in a.placement:
            key = (a.cluster, job.flavor, name)
            node = nodes[key]
            assert node.schedulable and not node.taints
            assert job.cluster in (None, a.cluster)
            used[key] += job.gpus_per_pod
    for key, gpus in used.items():
        assert gpus + nodes[key].used_by_others <= nodes[key].gpus, key


@SETTINGS
@given(snapshots())
def test_no_department_grows_above_nominal_plus_borrowing_limit(snap):
    res = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    usage = _usage(snap)
    before = dict(usage)
    for a in res.admissions:
        job = jobs[a.job_id]
        usage[(job.department, job.flavor)] += job.total_gpus
    limits = {(q.department, q.flavor): q for q in snap.quotas}
    for key, used in usage.items():
        if used == before.get(key, 0):
            continue
        q = limits.get(key)
        assert q is not None, key
        if q.borrowing_limit is not None:
            assert used <= q.nominal + q.borrowing_limit
    credits = snap.credits
    if credits is not None:
        spent = defaultdict(int)
        for a in res.admissions:
            spent[jobs[a.job_id].department] += jobs[a.job_id].hold
        for dept, amount in spent.items():
            assert amount <= credits.get(dept, 0)


@SETTINGS
@given(snapshots())
def test_preemption_safety(snap):
    res = schedule(snap)
    running = {r.id: r for r in snap.running}
    jobs = {j.id: j for j in snap.pending}
    usage = _usage(snap)
    nominal = defaultdict(int, {(q.department, q.flavor): q.nominal for q in snap.quotas})
    victims = [v for p in res.preemptions for v in p.victim_ids]
    assert len(victims) == len(set(victims))
    after = defaultdict(int, usage)  # the departments' use once every victim of the cycle has left
    for vid in victims:
        after[(running[vid].department, running[vid].flavor)] -= running[vid].total_gpus
    assert len(victims) <= max(0, snap.policy.preemption_rate_limit - snap.recent_preemptions)
    pods_per_budget = defaultdict(int)
    for p in res.preemptions:
        pre = jobs[p.preemptor_id]
        for vid in p.victim_ids:
            v = running[vid]
            assert v.tier != "realtime" and v.preemptible
            assert snap.now - v.started_at >= snap.policy.min_runtime_s
            for b in v.disruption_budgets:
                pods_per_budget[b] += v.pods
            if v.department != pre.department and usage[(v.department, v.flavor)] <= nominal[(v.department, v.flavor)]:
                within = usage[(pre.department, pre.flavor)] + pre.total_gpus <= nominal[(pre.department, pre.flavor)]
                if p.reason == "drain":
                    # a head drains cheap work of its tier or lower (its own tier only once it starves), but a
                    # realtime job that borrows never reaches another department's nominal quota this way
                    assert TIER_ORDER.index(v.tier) >= TIER_ORDER.index(pre.tier)
                    assert pre.tier != "realtime" or within
                else:
                    # otherwise a department within its nominal quota is only preempted by realtime work of a
                    # higher tier; a realtime job may borrow to start (Kueue's borrowWithinCohort at the realtime
                    # tier), but never more than the others' unused nominal once every victim has left
                    assert pre.tier == "realtime" and TIER_ORDER.index(v.tier) > TIER_ORDER.index(pre.tier)
                    if not within:
                        borrowed = usage[(pre.department, pre.flavor)] + pre.total_gpus - nominal[(pre.department, pre.flavor)]
                        lendable = sum(
                            min(max(0, q.nominal - after[(q.department, q.flavor)]),
                                q.nominal if q.lending_limit is None else q.lending_limit)
                            for q in snap.quotas
                            if q.flavor == pre.flavor and q.department != pre.department
                        )
                        assert borrowed <= lendable
    for budget in snap.disruption_budgets:
        assert pods_per_budget[budget.name] <= budget.disruptions_allowed


@SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_same_decision_for_any_input_order(snap, rnd):
    assert schedule(snap) == schedule(_reordered(snap, rnd))


def _reordered(snap, rnd):
    """The same snapshot with every tuple of the input shuffled and the usage mapping reversed."""

    def shuffled(items):
        items = list(items)
        rnd.shuffle(items)
        return tuple(items)

    return replace(
        snap,
        nodes=shuffled(snap.nodes),
        running=shuffled(snap.running),
        pending=shuffled(snap.pending),
        quotas=shuffled(snap.quotas),
        disruption_budgets=shuffled(snap.disruption_budgets),
        usage=dict(reversed(list(snap.usage.items()))),
        clusters=shuffled(snap.clusters),
    )


@SETTINGS
@given(snapshots())
def test_the_input_is_not_mutated_and_estimates_are_not_in_the_past(snap):
    before = repr(snap)
    res = schedule(snap)
    assert repr(snap) == before
    for r in res.pending:
        assert r.estimated_start is None or r.estimated_start >= snap.now


@SETTINGS
@given(snapshots())
def test_no_winner_pays_more_than_it_bid_and_the_price_is_the_highest_paid(snap):
    # Inside its quota as on borrowed capacity: a winner whose bid decided pays its critical bid either way,
    # so a price on an admission that borrowed nothing is right, never one above the bid. The clearing price
    # is that of spare GPUs: the highest a winner on borrowed capacity pays.
    res = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    paid: dict[str, int] = {}
    for a in res.admissions:
        assert a.price is None or 0 < a.price <= jobs[a.job_id].bid
        if a.price is not None and a.borrowed:
            paid[jobs[a.job_id].flavor] = max(a.price, paid.get(jobs[a.job_id].flavor, 0))
    assert res.clearing_prices == paid


@SETTINGS
@given(snapshots(), st.integers(1, 10_000), st.data())
def test_a_winner_s_payment_does_not_depend_on_its_own_bid(snap, raise_by, data):
    res = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    # winners whose bid bought their admission (the others pay the base price at any bid)
    paying = [a for a in res.admissions if a.borrowed and a.price is not None and jobs[a.job_id].bid]
    if not paying:
        return
    a = data.draw(st.sampled_from(paying))
    richer = replace(snap, pending=tuple(
        replace(j, bid=j.bid + raise_by) if j.id == a.job_id else j for j in snap.pending
    ))
    again = schedule(richer)
    mine = next((b for b in again.admissions if b.job_id == a.job_id), None)
    # With the same winners, and still on borrowed capacity (ranked earlier, a job may now fall inside its
    # department's nominal quota instead), it pays the same price.
    if {b.job_id for b in again.admissions} == {b.job_id for b in res.admissions} and mine.borrowed:
        assert mine.price == a.price


@SETTINGS
@given(snapshots())
def test_backfill_never_delays_a_reserved_head(snap):
    """EASY: at the reserved time T, the head's gang fits among pods still running then (running jobs and this
    cycle's admissions ending at their max runtime)."""
    res = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    for r in res.pending:
        if "reserved_from" not in r.detail:
            continue
        head, when, cluster = jobs[r.job_id], r.detail["reserved_from"], r.detail["cluster"]
        free = {
            n.name: n.gpus - n.used_by_others
            for n in snap.nodes
            if n.flavor == head.flavor and n.cluster == cluster and n.schedulable and not n.taints
        }
        busy = [(max(snap.now, j.expected_end), j.placement, j.gpus_per_pod) for j in snap.running
                if j.flavor == head.flavor and j.cluster == cluster]  # fmt: skip
        busy += [(snap.now + jobs[a.job_id].max_runtime_s, a.placement, jobs[a.job_id].gpus_per_pod)
                 for a in res.admissions if jobs[a.job_id].flavor == head.flavor and a.cluster == cluster]  # fmt: skip
        for end, placement, g in busy:
            if end > when:
                for name in placement:
                    if name in free:
                        free[name] -= g
        assert sum(max(0, f) // head.gpus_per_pod for f in free.values()) >= head.pods


# ---------------------------------------------------------------- several clusters


@SETTINGS
@given(snapshots(federated=True))
def test_never_admitted_on_a_closed_or_non_matching_cluster(snap):
    res = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    info = {c.name: c for c in snap.clusters}
    ids = [a.job_id for a in res.admissions] + [r.job_id for r in res.pending]
    assert sorted(ids) == sorted(jobs)
    assert all(r.code in reasons.CODES for r in res.pending)
    for a in res.admissions:
        job = jobs[a.job_id]
        cluster = info.get(a.cluster, ClusterInfo(a.cluster))
        assert cluster.state == "active", (a, cluster)
        assert set(job.cluster_selector) <= set(cluster.labels)
        assert job.cluster in (None, a.cluster)
        names = {n.name for n in snap.nodes if n.cluster == a.cluster and n.flavor == job.flavor}
        assert set(a.placement) <= names  # the nodes it names are that cluster's
    closed = {c.name for c in snap.clusters if c.state != "active"}
    running = {r.id: r for r in snap.running}
    for p in res.preemptions:
        # victims are taken only where the preemptor may start: never on a closed cluster
        assert all(running[v].cluster not in closed for v in p.victim_ids)
    for r in res.pending:
        if r.code == reasons.NO_MATCHING_CLUSTER:
            # no cluster its selector (and pin) allows offers its flavor (none may match at all)
            job = jobs[r.job_id]
            labels = {c.name: set(c.labels) for c in snap.clusters}
            offering = {n.cluster for n in snap.nodes if n.flavor == job.flavor}
            assert not any(
                set(job.cluster_selector) <= labels.get(c, set()) and job.cluster in (None, c) for c in offering
            )
        if "reserved_from" in r.detail:
            assert r.detail["cluster"] not in closed


@SETTINGS
@given(snapshots(federated=True))
def test_no_quota_scope_grows_beyond_its_limit(snap):
    """Per-cluster quotas bound a department's use of that cluster, global ones its use everywhere (where it
    has no per-cluster row, or has a global row too): no scope that grows this cycle ends above nominal +
    borrowing limit, and no department grows on a cluster it has no quota for at all."""
    res = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    rows = {(q.department, q.flavor, q.cluster): q for q in snap.quotas}

    def scopes(dept, flavor, cluster):
        local = (dept, flavor, cluster) in rows
        out = [(dept, flavor, cluster)] if local else []
        if (dept, flavor, None) in rows or not local:
            out.append((dept, flavor, None))
        return out

    before = defaultdict(int)
    for r in snap.running:
        for key in scopes(r.department, r.flavor, r.cluster):
            before[key] += r.total_gpus
    after = defaultdict(int, before)
    for a in res.admissions:
        job = jobs[a.job_id]
        for key in scopes(job.department, job.flavor, a.cluster):
            after[key] += job.total_gpus
    for key, used in after.items():
        if used == before.get(key, 0):
            continue
        q = rows.get(key)
        assert q is not None, key
        if q.borrowing_limit is not None:
            assert used <= q.nominal + q.borrowing_limit, key


@SETTINGS
@given(snapshots(federated=True), st.randoms(use_true_random=False))
def test_federated_decisions_do_not_depend_on_input_order(snap, rnd):
    first = schedule(snap)
    assert first == schedule(_reordered(snap, rnd))
    assert first == schedule(snap)
    for r in first.pending:
        assert r.estimated_start is None or r.estimated_start >= snap.now
