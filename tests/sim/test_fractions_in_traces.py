"""Fractions of a GPU in the simulator (docs/fractions.md): the trace's ``gpu_fraction`` column (round-tripped,
refused out of range), and a replay where four quarter-GPU notebooks share one GPU beside whole-GPU work."""

from __future__ import annotations

import io

import pytest

from simulator import policies
from simulator.jobs import prepare
from simulator.scenario import parse_scenario
from simulator.simulator import simulate
from simulator.trace import TraceError, parse_rows, write_csv

HEADER = "job_id,submit_time_s,duration_s,gpus,department,tier,gpu_fraction\n"


def _scenario():
    return parse_scenario({
        "name": "fractions",
        "cluster": {"node_groups": [{"name": "g", "count": 1, "gpus_per_node": 2, "flavor": "a100"}]},
        "departments": {"a": {"quotas": {"a100": {"nominal": 2}}}},
        "simulation": {"tick_s": 300, "strict": True},
    })


def test_the_fraction_column_round_trips_and_is_checked():
    rows = parse_rows(io.StringIO(HEADER + "j1,0,60,1,a,realtime,0.25\nj2,0,60,1,a,,\n"))
    assert rows[0].gpu_fraction == 0.25 and rows[1].gpu_fraction is None
    out = io.StringIO()
    write_csv(rows, out)
    assert parse_rows(io.StringIO(out.getvalue())) == rows
    for bad in ("1.5", "0", "1"):
        with pytest.raises(TraceError, match="gpu_fraction"):
            parse_rows(io.StringIO(HEADER + f"j1,0,60,1,a,,{bad}\n"))


def test_four_quarter_notebooks_share_one_gpu_and_leave_the_other_whole():
    text = HEADER + "".join(f"nb{i},0,3600,1,a,realtime,0.25\n" for i in range(4)) + "w,10,600,1,a,elastic,\n"
    sc, jobs, _ = prepare(_scenario(), rows=parse_rows(io.StringIO(text)), seed=1)
    assert jobs[0].share is not None and jobs[0].total_gpus == 0.25
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))
    by_key = {r.spec.key: r for r in res.jobs}
    assert all(by_key[f"nb{i}"].first_start == 0 for i in range(4))
    assert by_key["w"].first_start == 10  # the second GPU stayed whole for it
    assert all(r.state == "done" for r in res.jobs)


def test_a_fraction_joins_a_shared_gpu_on_a_node_with_no_whole_gpu_free():
    # nb0 opens GPU 0, the whole-GPU job takes GPU 1: the node has no whole GPU left, and nb1 still fits GPU 0
    text = HEADER + "nb0,0,3600,1,a,realtime,0.25\nw,5,3600,1,a,elastic,\nnb1,10,600,1,a,realtime,0.5\n"
    sc, jobs, _ = prepare(_scenario(), rows=parse_rows(io.StringIO(text)), seed=1)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))  # strict: a refused admission raises
    by_key = {r.spec.key: r for r in res.jobs}
    assert (by_key["w"].first_start, by_key["nb1"].first_start) == (5, 10)
    assert res.invalid["admission"] == 0


def test_a_realtime_job_evicts_the_quarters_sharing_a_gpu_together():
    # a's two elastic quarters share GPU 0 and a's whole-GPU job holds GPU 1, all for two hours, checkpointing
    # every 30 minutes (the trace's default); b's realtime job arrives 15 minutes past a checkpoint: the quarters
    # lose half of the whole job's work together, so both leave (the GPU frees once the second has gone) and
    # the realtime job starts on it
    sc = parse_scenario({
        "name": "fractions-evicted",
        "cluster": {"node_groups": [{"name": "g", "count": 1, "gpus_per_node": 2, "flavor": "a100"}]},
        "departments": {"a": {"quotas": {"a100": {"nominal": 1}}}, "b": {"quotas": {"a100": {"nominal": 1}}}},
        "simulation": {"tick_s": 60, "strict": True},
    })
    text = (HEADER + "q1,0,7200,1,a,elastic,0.25\nq2,0,7200,1,a,elastic,0.25\nw,0,7200,1,a,elastic,\n"
            "rt,4500,600,1,b,realtime,\n")
    sc, jobs, _ = prepare(sc, rows=parse_rows(io.StringIO(text)), seed=1)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))
    by_key = {r.spec.key: r for r in res.jobs}
    assert (by_key["q1"].preemptions, by_key["q2"].preemptions, by_key["w"].preemptions) == (1, 1, 0)
    assert by_key["rt"].first_start - 4500 <= 300 and by_key["rt"].preemptions == 0
    assert all(r.state == "done" for r in res.jobs) and res.invalid["admission"] == 0
    assert res.realtime_preempted == 0
