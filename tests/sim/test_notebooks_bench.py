"""The notebook scenario (benchmarks/notebooks.py): when researchers open notebooks, and what the three modes
replay, on the lab's own scenario and on a small one the simulator runs in a moment."""

from __future__ import annotations

import io

from benchmarks.notebooks import GPU_GB, NOTEBOOK_GB, measure, notebook_rows, with_notebooks
from simulator.jobs import prepare
from simulator.scenario import load_scenario, parse_scenario
from simulator.trace import parse_rows

DAY = 86400.0
LAB = "scenarios/lab1node.yaml"


def test_notebooks_open_on_weekdays_in_working_hours_inside_the_span():
    sc = load_scenario(LAB)
    rows = notebook_rows(sc, seed=3, start=2 * DAY, end=16 * DAY, per_day=1.0)
    assert rows
    for r in rows:
        day, hour = divmod(r.submit_time_s, DAY)
        assert int(day) % 7 < 5 and 9 * 3600 <= hour <= 17 * 3600
        assert 2 * DAY <= r.submit_time_s <= 16 * DAY
        assert 3600 <= r.duration_s <= 5 * 3600 and r.tier == "realtime"
        assert r.gpu_fraction * GPU_GB in NOTEBOOK_GB
        assert r.user in sc.departments[r.department].members
    weekdays = 10  # days 2..15 from a Monday: 10 weekdays
    people = sum(len(d.members) for d in sc.departments.values())
    assert 0.8 * weekdays * people <= len(rows) <= 1.2 * weekdays * people  # about one per researcher a weekday
    assert notebook_rows(sc, seed=3, start=2 * DAY, end=16 * DAY, per_day=1.0) == rows  # seeded


def _small():
    return parse_scenario({
        "name": "nb", "cluster": {"node_groups": [{"name": "g", "count": 1, "gpus_per_node": 2, "flavor": "a100"}]},
        "departments": {"a": {"quotas": {"a100": {"nominal": 2}}, "members": {"u": "standard"}}},
        "simulation": {"tick_s": 300},
    })


def test_on_whole_gpus_notebooks_keep_training_waiting_and_on_fractions_they_do_not():
    # two GPUs: a one-GPU training job at t=0 and a two-GPU one at t=60; three notebooks open at t=30
    train_text = ("job_id,submit_time_s,duration_s,gpus,department,tier\n"
                  "t1,0,7200,1,a,elastic\nt2,60,3600,2,a,elastic\n")
    sc, train, _ = prepare(_small(), rows=parse_rows(io.StringIO(train_text)), seed=1)
    nb_text = ("job_id,submit_time_s,duration_s,gpus,department,tier,gpu_fraction\n"
               + "".join(f"nb-{i},30,3600,1,a,realtime,0.125\n" for i in range(3)))
    nbs = parse_rows(io.StringIO(nb_text))
    whole = measure(sc, with_notebooks(sc, train, nbs, fractional=False, seed=1))
    frac = measure(sc, with_notebooks(sc, train, nbs, fractional=True, seed=1))
    alone = measure(sc, train)
    assert whole["refused"] == frac["refused"] == alone["refused"] == 0
    assert frac["notebooks"] == whole["notebooks"] == 3 and alone["notebooks"] == 0
    assert frac["nb_wait_mean_min"] == 0 and frac["nb_within_5min"] == 1  # all three share the free GPU
    assert whole["nb_within_5min"] < 1  # one whole GPU free for three notebooks
    assert frac["nb_gpus_held"] < whole["nb_gpus_held"]
    # on fractions the training jobs wait as in the lab without notebooks; on whole GPUs longer
    assert frac["train_wait_mean_h"] == alone["train_wait_mean_h"] < whole["train_wait_mean_h"]
