"""CPU-only jobs and jobs of roles in the simulator: the trace's ``roles`` column (round-tripped), CPU pools
and their quotas in scenarios, and replays that run CPU work on the pool, never on a GPU."""

from __future__ import annotations

import io

import pytest

from simulator import policies
from simulator.jobs import prepare
from simulator.scenario import ScenarioError, parse_scenario
from simulator.simulator import simulate
from simulator.trace import TraceError, TraceRow, parse_rows, write_csv

HEADER = "job_id,submit_time_s,duration_s,gpus,department,roles\n"


def _scenario(**over):
    data = {
        "name": "shapes",
        "cluster": {"node_groups": [{"name": "g", "count": 1, "gpus_per_node": 4, "flavor": "a100"},
                                    {"name": "c", "count": 2, "cores": 16, "memory_gib": 64, "flavor": "cpu"}]},
        "departments": {"a": {"quotas": {"a100": {"nominal": 4},
                                         "cpu": {"cores": {"nominal": 32}, "memory_gib": {"nominal": 128}}}}},
        "simulation": {"tick_s": 300, "strict": True},
    }
    data.update(over)
    return parse_scenario(data)


def test_roles_round_trip_through_the_trace_csv():
    text = HEADER + "j1,0,60,0,a,prep:2:0:4:8\nj2,10,60,8,a,trainer:2:4:16:64;data:4:0:2.5:8:cpu\nj3,20,60,2,a,\n"
    rows = parse_rows(io.StringIO(text))
    assert rows[1].roles == (("trainer", 2, 4, 16.0, 64.0, None), ("data", 4, 0, 2.5, 8.0, "cpu"))
    assert rows[2].roles == ()
    out = io.StringIO()
    write_csv(rows, out)
    assert parse_rows(io.StringIO(out.getvalue())) == rows
    assert "trainer:2:4:16:64;data:4:0:2.5:8:cpu" in out.getvalue()


@pytest.mark.parametrize("roles, gpus, message", [
    ("prep:2:0:4", 0, "NAME:PODS:GPUS:CORES:MEMORY_GIB"),
    ("Prep:2:0:4:8", 0, "NAME:PODS"),
    ("prep:0:0:4:8", 0, "at least 1 pod"),
    ("prep:1:0:0:8", 0, "asks for cores and memory"),
    ("a:1:0:1:1;a:1:0:1:1", 0, "two roles of one name"),
    ("a:1:4:1:1;b:1:2:1:1", 6, "one number of GPUs per pod"),
    ("t:2:4:1:1", 4, "gpus must be the roles' GPUs added up (8)"),
])
def test_bad_roles_in_a_trace_are_refused_with_their_line(roles, gpus, message):
    with pytest.raises(TraceError) as exc:
        parse_rows(io.StringIO(HEADER + f"j1,0,60,{gpus},a,{roles}\n"))
    assert "<trace>:2" in str(exc.value) and message in str(exc.value)


def _run(text: str, sc=None):
    sc = sc or _scenario()
    sc, jobs, _ = prepare(sc, rows=parse_rows(io.StringIO(text)), seed=1)
    return jobs, simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))


def test_cpu_only_and_two_role_jobs_run_their_cpu_pods_on_the_pool():
    jobs, res = _run(HEADER + "j1,0,600,0,a,prep:2:0:8:16\nj2,0,600,4,a,trainer:1:4:8:32;data:2:0:8:16\n")
    assert jobs[0].flavor == "cpu" and jobs[0].pods == 0 and jobs[0].total_gpus == 0
    assert jobs[1].flavor == "a100" and (jobs[1].pods, jobs[1].gpus_per_pod) == (1, 4)
    by_key = {r.spec.key: r for r in res.jobs}
    # both start at once: the pool has 32 cores, the two jobs' CPU pods take 32; the GPUs hold the trainer
    assert by_key["j1"].first_start == by_key["j2"].first_start == 0
    assert all(r.state == "done" for r in res.jobs)
    assert res.busy_gpu_s <= 4 * 600 + 1e-6  # only the trainer's GPUs were busy


def test_a_cpu_quota_makes_cpu_work_wait_as_gpus_do():
    sc = _scenario(departments={"a": {"quotas": {"a100": {"nominal": 4}, "cpu": {"cores": {"nominal": 8}}}}})
    _, res = _run(HEADER + "j1,0,600,0,a,prep:1:0:8:16\nj2,0,600,0,a,prep:1:0:8:16\n", sc)
    starts = sorted(r.first_start for r in res.jobs)
    assert starts == [0, 600]


def test_a_role_on_an_unknown_pool_or_bad_cpu_group_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="name one of cpu"):
        _run(HEADER + "j1,0,600,0,a,prep:1:0:8:16:disk\n")
    with pytest.raises(ScenarioError, match="cores and memory_gib above 0"):
        _scenario(cluster={"node_groups": [{"name": "c", "count": 1, "cores": 16, "flavor": "cpu"}]})
    with pytest.raises(ScenarioError, match="global only"):
        _scenario(departments={"a": {"quotas": {"cpu@x": {"cores": 4}}}})


def test_a_cpu_job_larger_than_the_pool_is_unfittable():
    with pytest.raises(ScenarioError, match="can never fit"):
        _run(HEADER + "j1,0,600,0,a,prep:5:0:16:16\n")


def test_trace_rows_without_roles_still_default():
    row = TraceRow(job_id="x", submit_time_s=0, duration_s=1, total_gpus=1, department="a")
    assert row.roles == ()


def test_the_cpu_pool_benchmark_keeps_cpu_jobs_off_the_gpus_only_in_pool_mode():
    from benchmarks import cpu_pools

    rows, cpu_jobs = cpu_pools.trace(seed=1, jobs=30, load=0.9)
    assert len(cpu_jobs) == 10 and all(r.total_gpus == 0 for r in rows if r.job_id in cpu_jobs)
    forced = cpu_pools.forced_gpu(rows)
    assert all(r.roles == () and r.total_gpus == r.pods >= 1 for r in forced if r.job_id in cpu_jobs)
    pool, gpu_min = cpu_pools.measure(rows, cpu_jobs), cpu_pools.measure(forced, cpu_jobs)
    assert pool["cpu_jobs_gpu_h"] == 0 and gpu_min["cpu_jobs_gpu_h"] > 0
