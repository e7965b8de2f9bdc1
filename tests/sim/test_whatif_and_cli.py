from pathlib import Path

from simulator import policies
from simulator.__main__ import main
from simulator.whatif import compare, format_diff

from .helpers import rows

ROOT = Path(__file__).resolve().parents[2]


def test_whatif_compare_reports_per_department_and_tier_differences():
    rs = rows(40)
    res = compare(
        rs,
        node_groups=[{"name": "n", "count": 2, "gpus_per_node": 4, "flavor": "a100"}],
        quotas={"a": {"a100": 4}, "b": {"a100": 4}},
        current=policies.make("fcfs"),
        proposed_policy={"aging_per_minute": 2.0},
    )
    assert set(res) == {"current", "proposed", "diff"}
    assert set(res["current"]["wait_dept"]) == {"a", "b"}
    assert "realtime" in res["diff"]["wait_tier"]
    d = res["diff"]["wait_avg"]
    assert d == res["proposed"]["wait_avg"] - res["current"]["wait_avg"]
    assert "dept a" in format_diff(res)


def test_cli_run_on_lab_slice(capsys):
    assert main(["run", str(ROOT / "scenarios" / "lab8.yaml"), "--policy", "fcfs,slurm-easy", "--limit", "150"]) == 0
    out = capsys.readouterr().out
    assert "fcfs" in out and "slurm-easy" in out


def test_cli_report_writes_markdown_and_plots(tmp_path):
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--scenarios", str(ROOT / "scenarios" / "lab8.yaml"),
                 "--loads", "0.9", "--seeds", "1", "--limit", "120", "--workers", "1",
                 "--policies", "fcfs,portal"]) == 0
    md = (out / "report.md").read_text()
    assert "| portal |" in md and "| fcfs |" in md
    assert (out / "lab8_utilisation.png").exists() and (out / "lab8_wait_cdf.png").exists()
    assert "## Targets" in md and "First wait by GPU-count class" in md and "queued avg" in md
    assert "Credits spent per department" in md
    import json

    res = json.loads((out / "results.json").read_text())
    assert {m["policy"] for m in res} == {"fcfs", "portal"}
    assert all("wait_gpus" in m and "queued" in m and "spend" in m for m in res)


def test_report_grid_continues_from_its_checkpoint(tmp_path):
    from simulator.report import run_grid

    ck = tmp_path / "replays.jsonl"
    grid = {"scenarios": [ROOT / "scenarios" / "lab8.yaml"], "policies_": ("fcfs", "slurm-easy"), "loads": (0.9,),
            "seeds": (1,), "limit": 80, "workers": 1}
    logs: list[str] = []
    first = run_grid(**grid, checkpoint=ck, log=logs.append)
    assert len(ck.read_text().splitlines()) == 2
    # an interruption mid-write leaves a partial line; the finished replays are not run again
    with ck.open("a") as fh:
        fh.write('{"policy": "fcf')
    logs.clear()
    again = run_grid(**grid, checkpoint=ck, log=logs.append)
    assert logs == [f"  2 replay(s) taken from {ck}, 0 to run"]
    assert [(m["policy"], m["utilisation"]) for m in again] == [(m["policy"], m["utilisation"]) for m in first]
    # another job limit is another replay
    logs.clear()
    run_grid(**{**grid, "limit": 60}, checkpoint=ck, log=logs.append)
    assert len(logs) == 2 and all("taken" not in line for line in logs)


def test_replay_ends_when_a_preemption_cannot_help():
    """Regression: a borrowing realtime job evicted its department's job inside nominal, which came back first
    in the next cycle; the replay evicted it every 10 simulated minutes forever."""
    import signal

    def too_long(*_):
        raise AssertionError("the replay did not end")

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(60)
    try:
        res = compare(rows(41), node_groups=[{"name": "n", "count": 2, "gpus_per_node": 4, "flavor": "a100"}],
                      quotas={"a": {"a100": 4}, "b": {"a100": 4}})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert res["current"]["never_started"] == 0 and res["current"]["preemptions"] < 10
