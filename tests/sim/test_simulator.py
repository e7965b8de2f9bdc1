from collections import Counter

import pytest

from engine import CycleResult, Preemption
from simulator import policies
from simulator.jobs import prepare
from simulator.simulator import simulate

from .helpers import rows, small_scenario


def _prepared(n=60, load=0.8):
    sc = small_scenario()
    sc, jobs, _ = prepare(sc, rows=rows(n), load=load)
    return sc, jobs


def _outcome(res):
    return [(r.spec.id, r.first_start, r.finish, r.preemptions, r.attempt) for r in res.jobs]


@pytest.mark.parametrize("name", ["portal", "tiresias", "kueue"])
def test_deterministic_for_a_seed(name):
    sc, jobs = _prepared()
    a = simulate(scenario=sc, jobs=jobs, policy=policies.make(name))
    b = simulate(scenario=sc, jobs=jobs, policy=policies.make(name))
    assert _outcome(a) == _outcome(b)


class Checked:
    """Wraps a policy and asserts on every snapshot that no node is over-committed."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.time_dependent = getattr(inner, "time_dependent", True)
        self.cycles = 0

    def bind(self, ctx):
        if hasattr(self.inner, "bind"):
            self.inner.bind(ctx)

    def __call__(self, snap):
        self.cycles += 1
        used = Counter()
        for rj in snap.running:
            for n in rj.placement:
                used[n] += rj.gpus_per_pod
        for node in snap.nodes:
            assert used[node.name] <= node.gpus - node.used_by_others
        ids = [j.id for j in snap.pending] + [j.id for j in snap.running]
        assert len(ids) == len(set(ids))  # a job is pending or running, never both
        return self.inner(snap)


@pytest.mark.parametrize(
    "name", [p for p in policies.DEFAULT if p != "k8s-quota-priority"] + ["k8s-quota-priority", "portal-noband"]
)
def test_conservation_every_job_finishes_once(name):
    sc, jobs = _prepared()
    pol = Checked(policies.make(name))
    res = simulate(scenario=sc, jobs=jobs, policy=pol)
    assert pol.cycles > 0
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}
    capacity = {j.spec.department: 4 for j in res.jobs}
    for r in res.jobs:
        if name == "k8s-quota-priority" and r.spec.total_gpus > capacity[r.spec.department]:
            assert r.finish is None  # a hard quota of 4 never admits an 8-GPU job
            continue
        assert r.finish is not None, (name, r.spec)
        assert r.finish >= r.first_start >= r.spec.submit
        # run time of the final attempt plus kept progress equals the job's duration
        assert r.progress_s == pytest.approx(r.spec.duration_s)
    assert res.busy_gpu_s <= res.capacity * (res.window[1] - res.window[0]) + 1e-6


@pytest.mark.parametrize("scenario_band", [None, 4.0])
def test_the_noband_variant_runs_the_engine_with_the_band_off_whatever_the_scenario_sets(
        monkeypatch, scenario_band):
    import engine

    seen = set()
    schedule = engine.schedule

    def spy(snap):
        seen.add(snap.policy.priority_band_weight)
        return schedule(snap)

    monkeypatch.setattr(engine, "schedule", spy)
    sc = small_scenario(**({"policy": {"priority_band_weight": scenario_band}} if scenario_band else {}))
    sc, jobs, _ = prepare(sc, rows=rows(30), load=0.8)
    simulate(scenario=sc, jobs=jobs, policy=policies.make("portal-noband"))
    assert seen == {0.0}
    assert policies.kind("portal-noband") == "portal"  # the report's targets treat it as the portal


class PreemptOnce:
    """FIFO; at the first cycle where job 2 waits, preempt job 1 for it, then admit job 2 first."""

    name = "preempt-once"
    time_dependent = False

    def __init__(self):
        self.fcfs = policies.make("fcfs")
        self.done = False

    def __call__(self, snap):
        from dataclasses import replace

        if self.done and any(j.id == 2 for j in snap.pending):  # the preemptor goes first
            snap = replace(snap, pending=tuple(j for j in snap.pending if j.id == 2))
        res = self.fcfs(snap)
        running = {r.id for r in snap.running if r.preemptible}
        if not self.done and 1 in running and any(j.id == 2 for j in snap.pending):
            self.done = True
            return CycleResult(admissions=res.admissions, preemptions=(Preemption(2, (1,), "priority"),))
        return res


def test_preempted_job_is_requeued_keeping_submit_time_and_counts_lost_work():
    from simulator.trace import TraceRow

    sc = small_scenario(cluster={"node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8, "flavor": "a100"}]})
    rs = [TraceRow("a", 0, 2000, 8, "a", tier="elastic"), TraceRow("b", 700, 100, 8, "b", tier="elastic")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=PreemptOnce())
    a, b = sorted(res.jobs, key=lambda r: r.spec.id)
    assert a.preemptions == 1 and a.attempt == 2
    assert a.spec.submit == 0 and a.first_start == 0
    # evicted at 700 (grace 30 s): the 600 s checkpoint survives, 130 s x 8 GPUs are lost
    assert a.lost_gpu_s == pytest.approx(130 * 8)
    assert b.first_start == pytest.approx(730)
    assert a.finish == pytest.approx(830 + 1400)
    assert res.preemption_events == 1


def test_min_cycle_interval_coalesces_cycles():
    sc, jobs = _prepared()
    from dataclasses import replace

    fast = simulate(scenario=sc, jobs=jobs, policy=policies.make("fcfs"))
    slow = simulate(scenario=sc, jobs=jobs, policy=policies.make("fcfs"),
                    options=replace(sc.options, min_cycle_interval_s=600))
    assert slow.cycles < fast.cycles
    assert all(r.finish is not None for r in slow.jobs)
