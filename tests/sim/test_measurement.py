"""Measurement side of the simulator: waits per GPU class, queued time over attempts, sharing safety for jobs
larger than their quota, unfittable jobs, strict FCFS, Tiresias's starvation guard, snapshot fields."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import Admission, CycleResult, Preemption
from simulator import metrics, policies
from simulator.jobs import load_trace, prepare
from simulator.policies.lasrtf import STARVELIMIT, Tiresias
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulator import simulate
from simulator.trace import TraceRow

from .helpers import rows, small_scenario

ROOT = Path(__file__).resolve().parents[2]


def _one_node(**over):
    return small_scenario(cluster={"node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8, "flavor": "a100"}]},
                          **over)


# ------------------------------------------------------------------ waits per GPU-count class


@pytest.mark.parametrize(("gpus", "cls"), [(1, "1"), (2, "2"), (3, "4"), (4, "4"), (5, "8"), (8, "8"), (9, ">8"),
                                           (64, ">8")])
def test_gpu_class_is_the_smallest_power_that_holds_the_job(gpus, cls):
    assert metrics.gpu_class(gpus) == cls


def test_wait_gpus_has_stats_per_class():
    sc, jobs, info = prepare(small_scenario(), rows=rows(60), load=0.8)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("fcfs"))
    m = metrics.compute(res, rho=info["rho"])
    sizes = {metrics.gpu_class(j.total_gpus) for j in jobs}
    assert set(m["wait_gpus"]) == sizes
    for c, st in m["wait_gpus"].items():
        assert set(st) == {"n", "avg", "p50", "p95", "p99"}
        waits = [r.first_start - r.spec.submit for r in res.jobs if metrics.gpu_class(r.spec.total_gpus) == c]
        assert st["n"] == len(waits) and st["avg"] == pytest.approx(sum(waits) / len(waits))


# ------------------------------------------------------------------ queued time over all attempts


class PreemptOnce:
    """FIFO; at the first cycle where job 2 waits, preempt job 1 for it, then admit job 2 first."""

    name = "preempt-once"
    time_dependent = False

    def __init__(self, borrowed=False, price=None):
        self.fcfs = policies.make("fcfs")
        self.done = False
        self.borrowed = borrowed
        self.price = price
        self.snaps = []

    def __call__(self, snap):
        from dataclasses import replace

        self.snaps.append(snap)
        if self.done and any(j.id == 2 for j in snap.pending):
            snap = replace(snap, pending=tuple(j for j in snap.pending if j.id == 2))
        res = self.fcfs(snap)
        adm = tuple(Admission(a.job_id, a.placement, a.cluster, self.borrowed, self.price) for a in res.admissions)
        running = {r.id for r in snap.running if r.preemptible}
        if not self.done and 1 in running and any(j.id == 2 for j in snap.pending):
            self.done = True
            return CycleResult(admissions=adm, preemptions=(Preemption(2, (1,), "priority"),))
        return CycleResult(admissions=adm)


def _preempt_pair(sc, **kw):
    rs = [TraceRow("a", 0, 2000, 8, "a", tier="elastic"), TraceRow("b", 700, 100, 8, "b", tier="elastic")]
    sc, jobs, info = prepare(sc, rows=rs, load=None)
    pol = PreemptOnce(**kw)
    return simulate(scenario=sc, jobs=jobs, policy=pol), pol, info


def test_queued_time_counts_every_attempt_including_the_last():
    res, _, info = _preempt_pair(_one_node())
    a = next(r for r in res.jobs if r.spec.id == 1)
    # first wait 0; evicted at 730 (grace 30 s), restarted at 830 when b finished: queued 100 s in all
    assert a.first_start == 0 and a.queued_s == pytest.approx(100)
    m = metrics.compute(res, rho=info["rho"])
    assert m["queued"]["avg"] == pytest.approx((100 + 30) / 2)  # b waited out a's 30 s grace period
    assert m["first_wait_finished"]["avg"] == pytest.approx(30 / 2)
    assert m["requeued_jobs"] == 1


# ------------------------------------------------------------------ sharing safety


def test_sharing_safety_reports_worst_waits_and_over_quota_jobs_against_fcfs():
    out = metrics.sharing_safety({1: 100, 2: 300, 3: 50, 4: 900, 5: 100}, {"a": {1: 100, 2: 400}, "b": {3: 10}},
                                 fcfs={4: 600, 5: 300}, over_quota={"a": [4], "b": [5, 6]})
    a = out["departments"]["a"]
    assert (a["shared_max"], a["alone_max"], a["safe"], a["safe_worst"]) == (300, 400, True, True)
    assert out["departments"]["b"]["safe_worst"] is True and out["safe_worst"] == 2
    big = out["over_quota"]
    assert big["jobs"] == 3 and big["n"] == 2  # job 6 never started: left out of the waits
    assert (big["shared_avg"], big["fcfs_avg"], big["shared_max"], big["fcfs_max"]) == (500, 450, 900, 600)
    assert big["departments"]["a"] == {"n": 1, "shared_avg": 900, "fcfs_avg": 600, "shared_max": 900,
                                       "fcfs_max": 600}


def test_jobs_larger_than_their_quota_are_reported_separately(tmp_path):
    from simulator.runner import run_one

    m = run_one(ROOT / "scenarios" / "lab1node.yaml", "portal", limit=80)
    big = m["sharing"]["over_quota"]
    assert big["jobs"] > 0  # medical's nominal quota is 1 GPU: its 2-8-GPU jobs can never start alone
    assert "medical" in big["departments"]
    assert all(d in m["sharing"]["departments"] for d in ("vision", "nlp", "medical"))


# ------------------------------------------------------------------ unfittable jobs


def test_a_job_that_fits_no_node_set_fails_the_scenario_with_its_id_and_size():
    sc = _one_node()
    rs = [TraceRow("ok", 0, 100, 4, "a"), TraceRow("huge", 10, 100, 16, "a"),
          TraceRow("wide", 20, 100, 12, "b", pods=1)]
    with pytest.raises(ScenarioError) as exc:
        prepare(sc, rows=rs, load=None)
    msg = str(exc.value)
    assert "2 job(s)" in msg and "huge (2 x 8 GPUs of a100; largest node 8" in msg
    assert "wide (1 x 12 GPUs" in msg and "unfittable: drop" in msg


def test_unfittable_drop_warns_and_leaves_them_out_of_rho():
    sc = _one_node(unfittable="drop")
    rs = [TraceRow("ok", 0, 100, 4, "a"), TraceRow("huge", 10, 100, 16, "a"), TraceRow("ok2", 100, 100, 4, "b")]
    with pytest.warns(UserWarning, match="huge"):
        _, jobs, info = prepare(sc, rows=rs, load=None)
    assert [j.key for j in jobs] == ["ok", "ok2"] and [j.id for j in jobs] == [1, 2]
    assert info["dropped_unfittable"] == 1
    assert info["rho"] == pytest.approx((4 * 100 * 2) / (8 * 100))


def test_a_gang_fits_when_enough_nodes_hold_one_pod_each():
    sc = small_scenario()  # 2 nodes of 4 GPUs
    ok = [TraceRow("g", 0, 100, 6, "a", pods=2)]  # 2 x 3: one pod per node
    _, jobs, _ = prepare(sc, rows=ok, load=None)
    assert jobs[0].pods == 2
    with pytest.raises(ScenarioError, match="g3"):
        prepare(sc, rows=[TraceRow("g3", 0, 100, 9, "a", pods=3)], load=None)  # 3 x 3: two nodes hold two


def test_unfittable_option_is_validated():
    with pytest.raises(ScenarioError, match="unfittable"):
        small_scenario(unfittable="ignore")


@pytest.mark.parametrize("name", ["lab8", "lab1node"])
def test_shipped_synthetic_scenarios_load(name):
    _, jobs, info = prepare(load_scenario(ROOT / "scenarios" / f"{name}.yaml"))
    assert info["dropped_unfittable"] == 0 and jobs


# ------------------------------------------------------------------ strict FCFS


def test_strict_fcfs_starts_nothing_behind_a_blocked_head():
    sc = _one_node()
    rs = [TraceRow("big1", 0, 1000, 6, "a"), TraceRow("big2", 10, 1000, 8, "a"), TraceRow("small", 20, 100, 1, "b")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    skip = {r.spec.key: r.first_start for r in simulate(scenario=sc, jobs=jobs, policy=policies.make("fcfs")).jobs}
    strict = {r.spec.key: r.first_start
              for r in simulate(scenario=sc, jobs=jobs, policy=policies.make("fcfs-strict")).jobs}
    assert skip["small"] == 20  # skip-ahead FCFS starts the small job beside big1
    assert strict["small"] == pytest.approx(2000)  # strict: after big2, which waited for big1
    assert strict["big2"] == pytest.approx(1000)
    assert "fcfs-strict" in policies.DEFAULT


# ------------------------------------------------------------------ Tiresias


class FakeCtx:
    def __init__(self, attained, last_run, since):
        self.a, self.last, self.since = attained, last_run, since

    def attained_gpu_s(self, job_id, now):
        return self.a[job_id]

    def last_run_s(self, job_id):
        return self.last[job_id]

    def pending_since(self, job_id):
        return self.since[job_id]


def _snap(now, pending):
    from engine import Node, Snapshot

    return Snapshot(now=now, nodes=(Node("n", "a100", 8),), pending=tuple(pending))


def test_tiresias_promotes_a_job_that_waited_starvelimit_times_its_last_run():
    from engine import PendingJob

    old = PendingJob(id=1, department="a", flavor="a100", gpus_per_pod=8, submitted_at=0)
    t = Tiresias()
    t.bind(FakeCtx({1: 50_000.0}, {1: 100.0}, {1: 1000.0}))
    assert t.key(old, 1000 + STARVELIMIT * 100)[0] == 2  # 50,000 GPU-s attained: lowest queue
    t(_snap(1000 + STARVELIMIT * 100, [old]))  # waited exactly the limit: not yet
    assert t.promotions == 0
    t(_snap(1000 + STARVELIMIT * 100 + 1, [old]))
    assert t.promotions == 1 and t.key(old, 0)[0] == 0  # promoted: its service counts from zero
    t(_snap(1000 + STARVELIMIT * 100 + 500, [old]))
    assert t.promotions == 1  # once per wait


def test_tiresias_never_promotes_a_job_that_never_ran():
    from engine import PendingJob

    t = Tiresias()
    t.bind(FakeCtx({1: 0.0}, {1: 0.0}, {1: 0.0}))
    t(_snap(10**7, [PendingJob(id=1, department="a", flavor="a100")]))
    assert t.promotions == 0


def test_baselines_receive_their_context_from_the_simulator():
    """Regression: the simulator bound the context to the core Policy instead of the decision function, so
    Tiresias saw no attained service (it ran FIFO) and the SRTF oracle ordered by max runtime."""
    sc, jobs, _ = prepare(small_scenario(), rows=rows(20), load=0.8)
    for name in ("tiresias", "srtf-oracle"):
        pol = policies.make(name)
        simulate(scenario=sc, jobs=jobs, policy=pol)
        assert pol.ctx is not None, name


# ------------------------------------------------------------------ snapshot fields


def test_snapshot_carries_checkpoint_intervals_and_the_preemptor_of_an_evicting_job():
    sc = _one_node()
    rs = [TraceRow("a", 0, 2000, 8, "a", tier="elastic", checkpoint_interval_s=300),
          TraceRow("b", 700, 100, 8, "b", tier="elastic"),
          TraceRow("c", 710, 10, 8, "b", tier="elastic"),  # a cycle inside a's grace period
          TraceRow("d", 780, 10, 8, "b", tier="elastic")]  # a cycle while b runs
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    pol = PreemptOnce()
    res = simulate(scenario=sc, jobs=jobs, policy=pol)
    during = next(s for s in pol.snaps if any(r.id == 1 and not r.preemptible for r in s.running))
    victim = next(r for r in during.running if r.id == 1)
    assert victim.evicting_for == 2 and victim.checkpoint_interval_s == 300  # the job's own interval
    b_running = next(r for s in pol.snaps for r in s.running if r.id == 2)
    assert b_running.checkpoint_interval_s == 600  # the scenario's default
    a = next(r for r in res.jobs if r.spec.id == 1)
    # evicted at 700 with a 300 s interval: 600 s kept, 100 s + 30 s grace lost
    assert a.lost_gpu_s == pytest.approx(130 * 8)


def test_zero_checkpoint_interval_means_the_job_never_checkpoints():
    sc = _one_node()
    rs = [TraceRow("a", 0, 2000, 8, "a", checkpoint_interval_s=0), TraceRow("b", 700, 100, 8, "b")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    pol = PreemptOnce()
    res = simulate(scenario=sc, jobs=jobs, policy=pol)
    assert next(r for s in pol.snaps for r in s.running if r.id == 1).checkpoint_interval_s is None
    assert next(r for r in res.jobs if r.spec.id == 1).lost_gpu_s == pytest.approx(730 * 8)


# ------------------------------------------------------------------ useful utilisation


def test_useful_utilisation_leaves_out_the_work_a_preemption_threw_away():
    sc = _one_node()
    rs = [TraceRow("a", 0, 2000, 8, "a", tier="elastic", checkpoint_interval_s=300),
          TraceRow("b", 700, 100, 8, "b", tier="elastic"),
          TraceRow("z", 1000, 10, 1, "b", tier="elastic")]  # the last submission closes the window at 1000 s
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=PreemptOnce())
    a = next(r for r in res.jobs if r.spec.id == 1)
    # a ran 0..730 (evicted at 700, grace 30 s): 600 s kept at its checkpoint, 600..730 lost
    assert a.lost_runs == [(pytest.approx(600.0), pytest.approx(730.0))]
    m = metrics.compute(res, rho=0.5, keep_samples=False)
    window = res.capacity * (res.window[1] - res.window[0])
    assert m["useful_utilisation"] == pytest.approx(m["utilisation"] - 130 * 8 / window)
    assert m["useful_utilisation"] < m["utilisation"]


def test_lost_work_outside_the_window_does_not_lower_useful_utilisation():
    class R:
        def __init__(self, gpus, lost_runs):
            self.spec = type("S", (), {"total_gpus": gpus})()
            self.lost_runs = lost_runs

    jobs = [R(2, [(50.0, 150.0)]), R(4, [(200.0, 300.0)]), R(1, [])]
    # only 50 s of the first segment lies inside (100, 250), and 50 s of the second
    assert metrics.lost_in_window(jobs, (100.0, 250.0)) == pytest.approx(50 * 2 + 50 * 4)
    assert metrics.lost_in_window(jobs, (400.0, 500.0)) == 0.0


def test_a_policy_that_never_preempts_has_useful_utilisation_equal_to_utilisation():
    sc, jobs, info = prepare(small_scenario(), rows=rows(40), load=0.9)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("fcfs"))
    m = metrics.compute(res, rho=info["rho"], keep_samples=False)
    assert m["useful_utilisation"] == m["utilisation"]


# ------------------------------------------------------------------ determinism across processes


def test_same_replay_gives_byte_identical_json_under_different_hash_seeds(tmp_path):
    outs = []
    for hs in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hs)
        p = subprocess.run(
            [sys.executable, "-m", "simulator", "run", str(ROOT / "scenarios" / "lab1node.yaml"),
             "--policy", "portal,fcfs,tiresias", "--limit", "120", "--json", "--no-timings"],
            capture_output=True, env=env, cwd=ROOT, check=True, timeout=300,
        )
        outs.append(p.stdout)
    assert outs[0] == outs[1]
    lines = outs[0].decode().splitlines()
    assert [json.loads(line)["policy"] for line in lines] == ["portal", "fcfs", "tiresias"]
    assert "wall_s" not in json.loads(lines[0]) and "wait_gpus" in json.loads(lines[0])


# ------------------------------------------------------------------ lab1node


def test_lab1node_is_one_8_gpu_node_with_quotas_adding_up_to_it():
    sc = load_scenario(ROOT / "scenarios" / "lab1node.yaml")
    assert [(n.gpus, n.flavor) for n in sc.nodes()] == [(8, "a100-80gb")]
    nominal = {q.department: q.nominal for q in sc.quotas()}
    assert sorted(nominal.values()) == [1, 3, 4] and sum(nominal.values()) == sc.capacity()
    assert all(q.borrowing_limit is None for q in sc.quotas())
    assert sc.load == 0.9
    rows_, _ = load_trace(sc, seed=1)
    span = max(r.submit_time_s for r in rows_) - min(r.submit_time_s for r in rows_)
    assert 13 * 86400 <= span <= 14 * 86400
    tiers = [r.tier for r in rows_]
    assert abs(tiers.count("realtime") / len(rows_) - 0.12) < 0.04
    assert abs(tiers.count("elastic") / len(rows_) - 0.5) < 0.06
    elastic = [r for r in rows_ if r.tier == "elastic"]
    assert {r.total_gpus for r in elastic} == {1, 2, 4, 8}
    assert 0.05 < sum(r.total_gpus == 8 for r in elastic) / len(elastic) < 0.15


def test_lab8_trace_is_unchanged():
    import hashlib

    sc = load_scenario(ROOT / "scenarios" / "lab8.yaml")
    digests = []
    for seed in (1, 2):
        rs, _ = load_trace(sc, seed=seed)
        key = [(r.job_id, r.submit_time_s, r.duration_s, r.total_gpus, r.department, r.user, r.tier, r.urgency,
                r.deadline_s, r.bid) for r in rs]
        digests.append(hashlib.sha256(repr(key).encode()).hexdigest()[:16])
    assert digests == ["0555f1e699457beb", "72803d9441b566ed"]


def test_synthetic_mix_rejects_unknown_keys():
    sc = small_scenario(trace={"loader": "synthetic", "jobs": 10, "mix": {"elastic": {"shares": 0.5}}})
    with pytest.raises(ScenarioError, match="shares"):
        load_trace(sc)
    sc = small_scenario(trace={"loader": "synthetic", "jobs": 10, "mix": {"training": {"share": 0.5}}})
    with pytest.raises(ScenarioError, match="training"):
        load_trace(sc)


def test_nan_free_helpers():
    assert math.isnan(metrics.mean([]))


# ------------------------------------------------------------------ the Targets section


def _agg_row(**kw):
    base = {"utilisation": 0.9, "rho": 0.9, "realtime_within_5min": 1.0, "wait_realtime_p95": 20.0,
            "wait_gpus": {"1": {"avg": 10.0}, "8": {"avg": 100.0}}, "wait_urgent_nonrt_avg": 10.0, "jain": 0.6,
            "lost_pct_of_busy": 1.0, "jct_avg": 100.0, "min_cycle_interval_s": 0.0}
    base.update(kw)
    return base


def test_targets_judge_the_portal_against_the_baselines_of_the_run():
    from simulator.report import targets

    agg = {
        ("lab", 0.9, "fcfs"): _agg_row(utilisation=0.85, useful_utilisation=0.85, wait_urgent_nonrt_avg=100.0,
                                       wait_gpus={"8": {"avg": 200.0}}),
        ("lab", 0.9, "slurm-easy"): _agg_row(utilisation=0.83, useful_utilisation=0.83),
        ("lab", 0.9, "tiresias"): _agg_row(wait_gpus={"8": {"avg": 40.0}}),
        ("lab", 0.9, "volcano-drf"): _agg_row(jain=0.7),
        ("lab", 0.9, "srtf-oracle"): _agg_row(jct_avg=90.0),
        ("lab", 0.9, "portal"): _agg_row(utilisation=0.86, useful_utilisation=0.84, wait_urgent_nonrt_avg=15.0,
                                         lost_pct_of_busy=3.5),
        ("lab", 0.7, "portal"): _agg_row(min_cycle_interval_s=60.0),
    }
    t = targets(agg)
    got = {label.split(":")[0]: (st, fig) for st, label, fig in t[("lab", 0.9)]}
    assert got["utilisation >= max(FCFS, Slurm-EASY)"][0] == "met"  # 0.86 >= 0.85
    assert got["utilisation >= 0.95 x min(1, rho)"][0] == "met"  # 0.86 >= 0.855
    useful = got["useful utilisation (net of work lost to preemption) >= max(FCFS, Slurm-EASY)"]
    assert useful[0] == "missed" and useful[1].startswith("0.840 vs FCFS 0.850")
    assert got[">= 99% of realtime jobs started within 5 min"][0] == "met"
    assert got["realtime p95 wait < 60 s"][0] == "met"
    big = got["largest GPU class (8 GPU) average wait <= 2x Tiresias's and <= FCFS's"]
    assert big[0] == "missed" and "Tiresias 40s" in big[1]  # 100 s > 2 x 40 s
    urgent = got["average first wait of high + critical non-realtime jobs <= 0.5x FCFS's"]
    assert urgent[0] == "met" and "goal 0.2x: met" in urgent[1]
    assert got["Jain index >= Volcano-DRF's"][0] == "missed"
    assert got["GPU-hours lost to preemption <= 3%"][0] == "missed"
    assert got["average JCT <= 1.3x the SRTF oracle's"][0] == "met"
    # load 0.7: no utilisation-vs-rho line, cycles 60 s apart make the p95 target n/a, references missing
    low = {label.split(":")[0]: st for st, label, _ in t[("lab", 0.7)]}
    assert "utilisation >= 0.95 x min(1, rho)" not in low
    assert low["realtime p95 wait < 60 s"] == "n/a" and low["utilisation >= max(FCFS, Slurm-EASY)"] == "n/a"


def test_every_policy_is_judged_by_the_portals_targets():
    """The matrix applies the same lines to each policy: a baseline meets the line it is the reference of, and
    fails the others on its own figures."""
    from simulator.report import _matrix, targets, targets_by_policy

    agg = {
        ("lab", 0.9, "fcfs"): _agg_row(utilisation=0.85, useful_utilisation=0.85, wait_urgent_nonrt_avg=100.0,
                                       realtime_within_5min=0.3, wait_gpus={"8": {"avg": 200.0}}),
        ("lab", 0.9, "slurm-easy"): _agg_row(utilisation=0.88, useful_utilisation=0.88, realtime_within_5min=0.2,
                                             wait_urgent_nonrt_avg=90.0, wait_gpus={"8": {"avg": 60.0}}),
        ("lab", 0.9, "tiresias"): _agg_row(utilisation=0.95, useful_utilisation=0.83, lost_pct_of_busy=12.0,
                                           wait_gpus={"8": {"avg": 40.0}}),
        ("lab", 0.9, "portal"): _agg_row(utilisation=0.86, useful_utilisation=0.86, wait_urgent_nonrt_avg=15.0),
    }
    m = targets_by_policy(agg)[("lab", 0.9)]
    assert list(m) == ["fcfs", "slurm-easy", "tiresias", "portal"]  # the registry's order
    util = "utilisation >= max(FCFS, Slurm-EASY)"
    assert [m[n][util] for n in m] == ["missed", "met", "met", "missed"]
    useful = "useful utilisation >= max(FCFS, Slurm-EASY)"
    assert m["tiresias"][useful] == "missed"  # 0.83: what its preemptions threw away
    big = "largest GPU class average wait <= 2x Tiresias's and <= FCFS's"
    assert [m[n][big] for n in m] == ["missed", "met", "met", "missed"]  # FCFS 200 s > 2 x 40 s
    rt = ">= 99% of realtime jobs started within 5 min"
    assert [m[n][rt] for n in m] == ["missed", "missed", "met", "met"]
    assert m["tiresias"]["GPU-hours lost to preemption <= 3%"] == "missed"
    # the portal's own lines are the same whether it is named or found
    assert [st for st, _, _ in targets(agg, subject="portal")[("lab", 0.9)]] == [
        st for st, _, _ in targets(agg)[("lab", 0.9)]]
    table = _matrix(m)
    assert table[0] == "| target | `fcfs` | `slurm-easy` | `tiresias` | `portal` |"
    assert f"| {util} | **missed** | met | met | **missed** |" in table
    # portal: 0.95 x rho, realtime, its p95, urgent waits and lost work met; utilisation, useful utilisation and
    # the largest class missed; Jain and JCT n/a (no Volcano-DRF or SRTF replay)
    assert table[-1] == "| **met** | 2 of 8 | 6 of 8 | 6 of 8 | 5 of 8 |"


def test_a_gpu_class_the_portal_never_started_is_a_missed_target():
    from simulator.report import targets

    agg = {
        ("lab", 0.9, "fcfs"): _agg_row(),
        ("lab", 0.9, "tiresias"): _agg_row(),
        ("lab", 0.9, "portal"): _agg_row(wait_gpus={"1": {"avg": 10.0}}),
    }
    got = {label.split(":")[0]: (st, fig) for st, label, fig in targets(agg)[("lab", 0.9)]}
    assert got["largest GPU class (8 GPU) average wait <= 2x Tiresias's and <= FCFS's"] == (
        "missed", "the portal's policy started none of them")


def test_convert_keeps_per_job_checkpoint_intervals(tmp_path):
    from simulator.__main__ import main
    from simulator.trace import read_csv, write_csv

    src = tmp_path / "in.csv"
    write_csv([TraceRow("a", 0, 100, 1, "a", checkpoint_interval_s=120.0), TraceRow("b", 5, 100, 1, "b")], src)
    scen = tmp_path / "s.yaml"
    scen.write_text(
        "cluster: {node_groups: [{name: n, count: 1, gpus_per_node: 8, flavor: a100}]}\n"
        "departments: {a: {quotas: {a100: 4}}, b: {quotas: {a100: 4}}}\n"
        f"trace: {{loader: csv, path: {src}}}\n"
    )
    out = tmp_path / "out.csv"
    assert main(["convert", str(scen), "--out", str(out)]) == 0
    assert [r.checkpoint_interval_s for r in read_csv(out)] == [120.0, None]


def test_targets_say_on_how_many_seeds_they_hold(tmp_path):
    """A target met on the seed average by less than the seeds differ is flagged: each seed is judged alone."""
    from simulator.report import _targets_section, aggregate, per_seed_targets, run_grid

    one = run_grid(scenarios=[ROOT / "scenarios" / "lab8.yaml"], policies_=("fcfs", "slurm-easy", "portal"),
                   loads=(0.9,), seeds=(1,), limit=40, workers=1)
    results = []
    for seed, portal_util in ((1, 0.95), (2, 0.80)):
        for m in one:
            m = dict(m, seed=seed, utilisation=0.85 if m["policy"] != "portal" else portal_util)
            results.append(m)
    by_seed = per_seed_targets(results)[("lab8", 0.9)]
    assert by_seed["utilisation >= max(FCFS, Slurm-EASY)"] == ["met", "missed"]
    lines = _targets_section(aggregate(results), results)
    util = next(line for line in lines if "utilisation >= max(FCFS, Slurm-EASY)" in line)
    assert util.startswith("- met:") and util.endswith("met on 1 of 2 seeds")  # average 0.875 >= 0.85
    # one seed: nothing to add
    single = _targets_section(aggregate(one), one)
    assert not any("seeds" in line for line in single if line.startswith("- "))


def test_the_loss_summary_names_a_useful_utilisation_lead_that_lost_work_hides():
    from simulator.report import _losses

    rows = [("fcfs", {"utilisation": 0.89, "useful_utilisation": 0.89, "wait_avg": 100.0, "jct_avg": 100.0,
                      "jain": 0.5}),
            ("portal", {"utilisation": 0.90, "useful_utilisation": 0.86, "wait_avg": 100.0, "jct_avg": 100.0,
                        "jain": 0.5})]
    (line, _) = _losses(rows)
    assert line == "`portal` loses on: useful utilisation vs `fcfs`"


# ------------------------------------------------------------------ jobs a policy never starts


class NeverStarts:
    """FIFO that never admits the jobs of ``ids`` (as a policy that cannot place them would)."""

    name = "never-starts"
    time_dependent = False

    def __init__(self, ids):
        self.fcfs = policies.make("fcfs")
        self.ids = set(ids)

    def __call__(self, snap):
        from dataclasses import replace

        return self.fcfs(replace(snap, pending=tuple(j for j in snap.pending if j.id not in self.ids)))


def _unserved_replay(ids=(2, 4)):
    rs = [TraceRow("rt", 0, 300, 1, "a", tier="realtime"),
          TraceRow("big", 10, 300, 8, "a", tier="elastic", urgency="high"),
          TraceRow("small", 20, 300, 2, "b", tier="elastic"),
          TraceRow("bf", 30, 300, 4, "b", tier="backfill", urgency="critical")]
    sc, jobs, info = prepare(_one_node(), rows=rs, load=None)
    return metrics.compute(simulate(scenario=sc, jobs=jobs, policy=NeverStarts(ids)), rho=info["rho"])


def test_jobs_a_policy_never_starts_are_counted_by_the_groups_the_targets_average():
    m = _unserved_replay()
    assert m["never_started"] == 2 and m["wait"]["n"] == 2  # the waits average the two started jobs only
    assert m["unstarted_tier"] == {"elastic": 1, "backfill": 1}
    assert m["unstarted_gpus"] == {"4": 1, "8": 1}
    assert m["unstarted_urgent_nonrt"] == 2  # high elastic and critical backfill
    assert m["unfinished"] == 2
    served = _unserved_replay(ids=())
    assert (served["never_started"], served["unstarted_tier"], served["unstarted_gpus"],
            served["unstarted_urgent_nonrt"], served["unfinished"]) == (0, {}, {}, 0, 0)


def test_a_policy_that_leaves_jobs_unstarted_misses_the_wait_and_jct_lines_they_belong_to():
    from simulator.report import _matrix, targets, targets_by_policy

    refs = {
        ("lab", 0.9, "fcfs"): _agg_row(utilisation=0.85, wait_urgent_nonrt_avg=100.0, wait_gpus={"8": {"avg": 200.0}}),
        ("lab", 0.9, "tiresias"): _agg_row(wait_gpus={"8": {"avg": 150.0}}),
        ("lab", 0.9, "srtf-oracle"): _agg_row(jct_avg=90.0),
    }
    # By the averages of the jobs it started, the portal would meet all four lines (20 s p95, 100 s for 8 GPUs,
    # 10 s for urgent work, a JCT of 100 s): but it left jobs of each unstarted, 1.5 per seed on average.
    left = {"unstarted_tier": {"realtime": 1.5, "elastic": 2.0}, "unstarted_gpus": {"8": 2.0},
            "unstarted_urgent_nonrt": 1.0, "unfinished": 3.5}
    agg = {**refs, ("lab", 0.9, "portal"): _agg_row(**left)}
    got = {label.split(":")[0]: (st, fig) for st, label, fig in targets(agg)[("lab", 0.9)]}
    assert got["realtime p95 wait < 60 s"] == ("missed", "1.5 realtime job(s) never started (the started: 20s)")
    assert got["largest GPU class (8 GPU) average wait <= 2x Tiresias's and <= FCFS's"] == (
        "missed", "2 of them never started (the started: 100s)")
    assert got["average first wait of high + critical non-realtime jobs <= 0.5x FCFS's"] == (
        "missed", "1 of them never started (the started: 10s vs FCFS 100s)")
    assert got["average JCT <= 1.3x the SRTF oracle's"] == (
        "missed", "3.5 job(s) never finished (the finished: 100s vs 90s)")
    assert got[">= 99% of realtime jobs started within 5 min"][0] == "met"  # (its share already counts them)
    # the same figures with every job started meet the four lines
    served = {**refs, ("lab", 0.9, "portal"): _agg_row(**{k: ({} if isinstance(v, dict) else 0) for k, v in left.items()})}
    ok = {label.split(":")[0].split(" (")[0]: st for st, label, _ in targets(served)[("lab", 0.9)]}
    assert [ok[k] for k in ("realtime p95 wait < 60 s", "largest GPU class", "average JCT <= 1.3x the SRTF oracle's",
                            "average first wait of high + critical non-realtime jobs <= 0.5x FCFS's")] == ["met"] * 4
    # the per-policy matrix judges every policy the same way: FCFS left 8-GPU jobs unstarted, so it misses the
    # largest-class line even against itself
    agg[("lab", 0.9, "fcfs")] = _agg_row(utilisation=0.85, wait_urgent_nonrt_avg=100.0, wait_gpus={"8": {"avg": 200.0}},
                                         unstarted_gpus={"8": 1.0}, unfinished=1.0)
    m = targets_by_policy(agg)[("lab", 0.9)]
    big = "largest GPU class average wait <= 2x Tiresias's and <= FCFS's"
    assert m["fcfs"][big] == "missed" and m["tiresias"][big] == "met" and m["portal"][big] == "missed"
    assert m["fcfs"]["average JCT <= 1.3x the SRTF oracle's"] == "missed"
    assert f"| {big} | **missed** | met | met | **missed** |" in _matrix(m)


def test_a_class_only_unstarted_jobs_have_is_still_the_largest_class():
    from simulator.report import targets

    agg = {
        ("lab", 0.9, "fcfs"): _agg_row(wait_gpus={"1": {"avg": 10.0}}, unstarted_gpus={">8": 2.0}),
        ("lab", 0.9, "tiresias"): _agg_row(wait_gpus={"1": {"avg": 10.0}}, unstarted_gpus={">8": 2.0}),
        ("lab", 0.9, "portal"): _agg_row(wait_gpus={"1": {"avg": 10.0}}, unstarted_gpus={">8": 2.0}),
    }
    got = {label.split(":")[0]: (st, fig) for st, label, fig in targets(agg)[("lab", 0.9)]}
    assert got["largest GPU class (>8 GPU) average wait <= 2x Tiresias's and <= FCFS's"] == (
        "missed", "the portal's policy started none of them")


def test_unserved_counts_reach_the_report_through_the_seed_average():
    from simulator.report import aggregate

    one = dict(_unserved_replay(), scenario="lab", load=0.9, seed=1)
    two = dict(_unserved_replay(ids=()), scenario="lab", load=0.9, seed=2)
    a = aggregate([one, two])[("lab", 0.9, "never-starts")]
    assert a["unstarted_gpus"]["8"] == 0.5 and a["unstarted_gpus"]["1"] == 0
    assert a["unstarted_tier"]["elastic"] == 0.5 and a["unstarted_urgent_nonrt"] == 1.0 and a["unfinished"] == 1.0
