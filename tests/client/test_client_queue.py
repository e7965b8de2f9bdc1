"""``Client.queue`` and ``gpup queue`` against the live portal: the whole queue, another department's jobs by
department and size only."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from client_world import JOB, run_cycle

from gpuportal.cli import cli

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(portal, lab):
    """The cluster's 8 GPUs busy with one nlp gang, then a vision job and an nlp job that wait."""
    bob = portal(lab.bob)
    bob.submit({**JOB, "name": "filler", "gpus": 4, "pods": 2})
    run_cycle()
    alice = portal(lab.alice)
    mine = alice.submit({**JOB, "name": "visionqueued", "gpus": 2})
    theirs = bob.submit({**JOB, "name": "nlpqueued", "gpus": 1})
    run_cycle()
    return mine, theirs


def test_the_client_reads_the_whole_queue(portal, lab, world):
    mine, _ = world
    rows = portal(lab.alice).queue()
    assert [r["position"] for r in rows] == [1, 2]
    by_dept = {r["department"]: r for r in rows}
    assert by_dept["vision"]["id"] == mine["id"] and by_dept["vision"]["name"] == "visionqueued"
    assert set(by_dept["nlp"]) == {"position", "flavor", "department", "tier", "gpus", "pods", "waiting_s",
                                   "estimated_start", "reason", "own"}
    assert by_dept["nlp"]["gpus"] == 1
    assert portal(lab.alice).queue(flavor="a100-mig-3g.40gb") == []
    assert len(portal(lab.alice).queue(limit=1)) == 1


def test_gpup_queue_prints_it_like_squeue(live_server, lab, token_for, tmp_path, world):
    env = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": token_for(lab.bob),
           "GPU_PORTAL_CONFIG": str(tmp_path / "config.toml")}
    result = CliRunner().invoke(cli, ["queue"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["FLAVOR", "POS", "DEPARTMENT", "JOB", "TIER", "GPUS", "WAITING", "STARTS", "REASON"]
    assert "visionqueued" not in result.output and "alice" not in result.output
    assert any("nlpqueued (bob)" in line for line in lines) and any(" vision " in line for line in lines)
    as_json = CliRunner().invoke(cli, ["queue", "--json", "--flavor", "a100-80gb"], env=env, catch_exceptions=False)
    assert [r["department"] for r in json.loads(as_json.output)] in (["vision", "nlp"], ["nlp", "vision"])
    bad = CliRunner().invoke(cli, ["queue", "--flavor", "nope"], env=env, catch_exceptions=False)
    assert bad.exit_code != 0 and "No flavor nope" in bad.output + (bad.stderr if bad.stderr_bytes else "")
