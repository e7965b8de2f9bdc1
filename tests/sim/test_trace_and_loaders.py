import csv
import io
import os
from pathlib import Path

import pytest

from simulator import loaders
from simulator.jobs import build_jobs, prepare, split_pods
from simulator.trace import TraceError, compress_to_load, offered_load, parse_rows, read_csv, write_csv

from .helpers import rows, small_scenario

TRACES = Path(os.environ.get("SIM_TRACE_DIR", Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"))


def test_parse_required_and_optional_defaults():
    text = "job_id,submit_time_s,duration_s,gpus,department,tier,deadline_s,pods\nj1,0,60,2,a,,,\nj2,5.5,30,4,b,realtime,100,2\n"
    r1, r2 = parse_rows(io.StringIO(text))
    assert (r1.job_id, r1.total_gpus, r1.tier, r1.deadline_s, r1.pods, r1.bid, r1.flavor) == ("j1", 2, None, None, None, 0, None)
    assert (r2.submit_time_s, r2.tier, r2.deadline_s, r2.pods) == (5.5, "realtime", 100.0, 2)


def test_missing_required_column_is_an_error():
    with pytest.raises(TraceError, match="department"):
        parse_rows(io.StringIO("job_id,submit_time_s,duration_s,gpus\nj,0,1,1\n"))


def test_csv_roundtrip(tmp_path):
    rs = rows(10)
    write_csv(rs, tmp_path / "t.csv")
    assert read_csv(tmp_path / "t.csv") == rs


def test_a_written_trace_neutralises_text_a_spreadsheet_would_run(tmp_path):
    from dataclasses import replace

    rs = [replace(r, user=user) for r, user in zip(rows(4), ["=1+1", "\tx", "ok", "@SUM(A1)"], strict=True)]
    rs[2] = replace(rs[2], cluster_selector=(("=k", "v"),))
    rs[3] = replace(rs[3], deadline_s=-5.0)  # a number, even a negative one, is not a formula
    write_csv(rs, tmp_path / "t.csv")
    got = list(csv.DictReader((tmp_path / "t.csv").open(newline="")))
    assert [g["user"] for g in got] == ["'=1+1", "'\tx", "ok", "'@SUM(A1)"]
    assert got[2]["cluster_selector"] == "'=k=v"
    assert got[3]["deadline_s"] == "-5"


def test_compression_hits_target_load_and_keeps_deadline_slack():
    rs = rows(50)
    out, factor = compress_to_load(rs, 8, 0.7)
    assert offered_load(out, 8) == pytest.approx(0.7)
    for a, b in zip(rs, out, strict=True):
        assert b.duration_s == a.duration_s
        if a.deadline_s is not None:
            assert b.deadline_s - b.submit_time_s == pytest.approx(a.deadline_s - a.submit_time_s)


def test_split_pods():
    assert split_pods(4, 8) == (1, 4)
    assert split_pods(16, 8) == (2, 8)
    assert split_pods(12, 8) == (2, 6)
    assert split_pods(20, 8) == (4, 5)


def test_assignment_is_seeded_and_fills_defaults():
    sc = small_scenario(assign={"tier": {"realtime": 0.5, "backfill": 0.5}, "urgency": {"high": 1}})
    rs = [r.__class__(r.job_id, r.submit_time_s, r.duration_s, r.total_gpus, r.department) for r in rows(40)]
    a = build_jobs(sc, rs, seed=3)
    b = build_jobs(sc, rs, seed=3)
    assert a == b
    assert {j.tier for j in a} == {"realtime", "backfill"}
    assert {j.urgency for j in a} == {"high"}
    assert all(j.user in ("alice", "al", "bob") for j in a)
    assert all(j.max_runtime_s >= j.duration_s for j in a)


def test_prepare_reports_rho():
    sc = small_scenario()
    _, jobs, info = prepare(sc, rows=rows(40), load=0.9)
    assert info["rho"] == pytest.approx(0.9)
    assert len(jobs) == 40


PHILLY = """job_id,vc,submit_time_s,num_gpus,job_type,total_steps,est_duration_v100_s
v1-0,v1,0,1,ResNet,10,100
v1-1,v1,10,8,ResNet,10,
v2-0,v2,20,8,LM,10,500
"""


def test_philly_parser_imputes_or_drops_missing_durations():
    sampled = loaders.parse_philly(io.StringIO(PHILLY), missing_duration="sample")
    assert [r.department for r in sampled] == ["v1", "v1", "v2"]
    assert sampled[1].duration_s == 500.0  # the only known 8-GPU duration
    dropped = loaders.parse_philly(io.StringIO(PHILLY), missing_duration="drop")
    assert [r.job_id for r in dropped] == ["v1-0", "v2-0"]
    assert loaders.parse_vc_sizes(io.StringIO("vc,node num\nv1,64\nv2,8\n")) == {"v1": 64.0, "v2": 8.0}


def test_elasticflow_parser_keeps_absolute_deadlines():
    text = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\nx,100,5,bert,700,128,2,300\n"
    (r,) = loaders.parse_elasticflow(io.StringIO(text))
    assert (r.submit_time_s, r.deadline_s, r.total_gpus, r.duration_s) == (100.0, 700.0, 2, 300.0)


def test_alibaba_parser_maps_qos_and_skips_cpu_pods():
    text = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1,1,460,,LS,Running,0,100,10\n"
        "p1,1000,1,0,0,,BE,Running,0,100,0\n"
        "p2,1000,1,2,1000,V100M16,BE,Failed,5,50,5\n"
        "p3,1000,1,1,1000,,Burstable,Pending,5,50,\n"
    )
    out = loaders.parse_alibaba(io.StringIO(text))
    assert [(r.job_id, r.tier, r.total_gpus, r.duration_s) for r in out] == [("p0", "realtime", 1, 90.0), ("p2", "backfill", 2, 45.0)]


@pytest.mark.skipif(not (TRACES / "philly_gavel_per_vc.csv").exists(), reason="public traces not present")
def test_real_trace_files_parse():
    with open(TRACES / "philly_gavel_per_vc.csv") as fh:
        head = [next(fh) for _ in range(50)]
    rs = loaders.parse_philly(head)
    assert len(rs) == 49 and all(r.total_gpus > 0 and r.duration_s > 0 for r in rs)
    with open(TRACES / "philly_vc_size.csv") as fh:
        assert len(loaders.parse_vc_sizes(fh)) >= 10
    ef, _ = loaders.load_elasticflow(TRACES / "elasticflow-traces.tar.gz", cluster="cluster10")
    assert len(ef) > 100 and all(r.deadline_s is not None for r in ef)
    with open(TRACES / "openb_pod_list_default.csv") as fh:
        head = [next(fh) for _ in range(200)]
    ali = loaders.parse_alibaba(head)
    assert ali and {r.tier for r in ali} <= {"realtime", "backfill", "elastic"}
    groups = loaders.alibaba_node_groups(TRACES / "openb_node_list_gpu_node.csv")
    assert sum(g["count"] * g["gpus_per_node"] for g in groups) == 6212


@pytest.mark.skipif(not (TRACES / "philly_gavel_per_vc.csv").exists(), reason="public traces not present")
@pytest.mark.parametrize("name", ["philly", "elasticflow", "alibaba"])
def test_public_trace_scenarios_have_no_unfittable_jobs(name):
    """Unfittable jobs now fail a scenario at load time: the shipped public-trace scenarios must still load."""
    from simulator.scenario import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / f"{name}.yaml")
    _, jobs, info = prepare(sc, trace_dir=TRACES)
    assert jobs and info["dropped_unfittable"] == 0


def test_a_trace_row_may_carry_its_own_cluster_labels():
    head = "job_id,submit_time_s,duration_s,gpus,department,cluster_selector,cluster_preference\n"
    rows = parse_rows([head, "a,0,60,1,x,data=cloud;region=eu,\n", "b,1,60,1,x,,tier=cheap\n"])
    assert rows[0].cluster_selector == (("data", "cloud"), ("region", "eu")) and rows[0].cluster_preference is None
    assert rows[1].cluster_selector is None and rows[1].cluster_preference == (("tier", "cheap"),)
    with pytest.raises(TraceError, match="key=value"):
        parse_rows([head, "c,0,60,1,x,cloud,\n"])
