"""gpup against the live portal: exit codes, human output and --json, job files, login's config file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from client_world import JOB, finish_pods, run_cycle

from gpuportal.cli import cli

pytestmark = pytest.mark.django_db(transaction=True)

JOB_YAML = """\
name: resnet50
image: nvcr.io/nvidia/pytorch:24.05-py3
command: [python, train.py]
flavor: a100-80gb
gpus: 2
max_runtime_s: 7200
"""


@pytest.fixture
def gpup(live_server, lab, token_for, tmp_path):
    """gpup(*args, user=alice, input=None) -> click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def run(*args, user=None, input=None, env=None):
        base = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": token_for(user or lab.alice),
                "GPU_PORTAL_CONFIG": str(tmp_path / "config.toml")}
        return runner.invoke(cli, list(map(str, args)), env={**base, **(env or {})}, input=input,
                             catch_exceptions=False)

    return run


@pytest.fixture
def job_file(tmp_path):
    def make(text: str = JOB_YAML, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return make


def _job(id_):
    from scheduling.models import Job

    return Job.objects.get(pk=id_)


def test_submit_get_ls_and_json(gpup, job_file, lab):
    result = gpup("submit", "-f", job_file())
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("submitted job ") and "queued" in result.stdout
    job_id = int(result.stdout.split()[2])
    assert _job(job_id).gpus_per_pod == 2 and _job(job_id).max_runtime_s == 7200

    result = gpup("--json", "submit", "-f", job_file(), "--key", "run-1")
    again = gpup("submit", "-f", job_file(), "--key", "run-1", "--json")
    assert json.loads(result.stdout)["id"] == json.loads(again.stdout)["id"]

    result = gpup("get", job_id)
    assert result.exit_code == 0 and "state" in result.stdout and "resnet50" in result.stdout
    assert "timeline" in result.stdout
    assert json.loads(gpup("get", job_id, "--json").stdout)["id"] == job_id

    result = gpup("ls")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].split() == ["ID", "NAME", "STATE", "REASON", "GPUS", "TIER", "OWNER",
                                                     "TEAM", "SUBMITTED"]
    assert len(result.stdout.splitlines()) == 3
    listed = json.loads(gpup("ls", "--json", "--state", "queued").stdout)
    assert {j["id"] for j in listed} == {job_id, json.loads(again.stdout)["id"]}
    assert json.loads(gpup("ls", "--json", "--state", "running").stdout) == []
    assert json.loads(gpup("ls", "--json", user=lab.amy).stdout) == []  # mine by default
    assert len(json.loads(gpup("ls", "--json", "--all", user=lab.amy).stdout)) == 2


def test_teams_and_the_team_column_of_ls(gpup, job_file, lab):
    from portal.models import Membership, Team
    from quotas.models import TeamQuota

    det = Team.objects.create(department=lab.vision, slug="det", name="det")
    TeamQuota.objects.create(team=det, flavor=lab.a100, nominal=2, borrowing_limit=0)
    Membership.objects.filter(user=lab.amy).update(team=det, team_admin=True)
    assert gpup("teams", user=lab.alice).stdout == "no teams\n"  # a researcher of no team sees none
    shown = gpup("teams", user=lab.vadmin).stdout.splitlines()
    assert shown[1].split() == ["vision", "det", "a100-80gb", "2", "0", "all", "amy*"]
    assert gpup("submit", "-f", job_file(), user=lab.amy).exit_code == 0
    header, row = gpup("ls", user=lab.amy).stdout.splitlines()[:2]
    assert row[header.index("TEAM"):].split()[0] == "det"
    assert json.loads(gpup("teams", "--json", user=lab.amy).stdout)[0]["members"] == [
        {"user": "amy", "team_admin": True}]


def test_a_list_file_is_one_batch(gpup, job_file):
    path = job_file("jobs:\n" + "".join(f"  - {json.dumps({**JOB, 'name': f'lr{i}'})}\n" for i in range(3)))
    result = gpup("--json", "submit", "-f", path)
    assert result.exit_code == 0, result.output
    assert [j["name"] for j in json.loads(result.stdout)] == ["lr0", "lr1", "lr2"]


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\n  image: [unclosed\n", "not valid YAML (line 2"),
    ("just a string\n", "expected a job (a mapping"),
    ("[1, 2]\n", "a list of jobs must hold one or more mappings"),
])
def test_a_bad_job_file_is_a_clear_usage_error(gpup, job_file, text, message):
    result = gpup("submit", "-f", job_file(text))
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output
    assert "gpup: " in result.stderr


def test_a_missing_file_and_bad_options_exit_2(gpup, tmp_path):
    result = gpup("submit", "-f", tmp_path / "nope.yaml")
    assert result.exit_code == 2 and "cannot read" in result.stderr
    assert gpup("get", "forty-two").exit_code == 2
    assert gpup("submit").exit_code == 2  # -f is required


def test_fields_the_portal_refuses_are_listed_with_exit_2(gpup, job_file, lab):
    result = gpup("submit", "-f", job_file(JOB_YAML + "privileged: true\ngpus_typo: 3\n"))
    assert result.exit_code == 2
    assert "privileged" in result.stderr and "unknown_field" in result.stderr and "gpus_typo" in result.stderr
    assert "Traceback" not in result.output
    result = gpup("--json", "submit", "-f", job_file(JOB_YAML.replace("gpus: 2", "gpus: -1")))
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["fields"]["gpus"][0]["code"] == "min_value"
    from scheduling.models import Job

    assert not Job.objects.exists()


def test_exit_codes_for_not_found_auth_conflict_and_unreachable(gpup, lab, submit):
    bobs = submit(lab.bob)
    assert gpup("get", bobs.pk).exit_code == 3
    assert gpup("cancel", bobs.pk).exit_code == 3
    assert gpup("get", 999999).exit_code == 3
    result = gpup("whoami", env={"GPU_PORTAL_TOKEN": "gpp_1_wrong"})
    assert result.exit_code == 4 and "authentication_failed" in result.stderr
    assert gpup("submit", "-f", "-", input=JOB_YAML, user=lab.stranger).exit_code == 4

    mine = submit(lab.alice)
    result = gpup("cancel", mine.pk, "-m", "wrong data")
    assert result.exit_code == 0 and "cancelled" in result.stdout
    assert gpup("cancel", mine.pk).exit_code == 0  # idempotent
    done = submit(lab.alice, name="done")
    run_cycle()
    finish_pods()
    result = gpup("cancel", done.pk)
    assert result.exit_code == 6 and "invalid_state" in result.stderr

    result = gpup("--retries", "0", "whoami", env={"GPU_PORTAL_URL": "http://127.0.0.1:9"})
    assert result.exit_code == 5 and "could not be reached" in result.stderr


def test_wait_exits_by_how_the_job_ended(gpup, lab, submit):
    ok = submit(lab.alice, name="ok")
    bad = submit(lab.alice, name="bad", env={"SIM_EXIT_CODE": "2"})
    slow = submit(lab.alice, name="slow", gpus=4, pods=2)  # no cycle admits it while we wait
    run_cycle()
    finish_pods()
    result = gpup("wait", ok.pk, "--no-progress")
    assert result.exit_code == 0 and f"job {ok.pk}: succeeded" in result.stdout
    result = gpup("wait", bad.pk, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["job"]["exit_code"] == 2
    assert "exit code 2" in result.stderr
    result = gpup("wait", slow.pk, "--timeout", "0.3", "--interval", "0.1", "--no-progress")
    assert result.exit_code == 8 and "still queued" in result.stderr


def test_logs_and_quote(gpup, lab, submit, job_file):
    job = submit(lab.alice, command=["python", "train.py"])
    run_cycle()
    finish_pods()
    result = gpup("logs", job.pk)
    assert result.exit_code == 0 and result.stdout == "$ python train.py\ndone\n"
    assert gpup("logs", "-f", job.pk).stdout == "$ python train.py\ndone\n"  # ended: follow stops at once
    assert gpup("logs", "--tail", "1", "--json", job.pk).stdout == '"done"\n'

    from quotas.models import Price

    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1500)
    result = gpup("quote", "-f", job_file())
    assert result.exit_code == 0, result.output
    assert "at most 6 credits" in result.stdout and "not metered" in result.stdout  # 2 GPUs x 2 h x 1.5
    assert json.loads(gpup("quote", "-f", job_file(), "--json").stdout)["estimated_cost"] == 6000
    assert "sizes" not in result.stdout
    # a resizable job of 1 to 4 one-GPU pods starts at 4 on the idle cluster: the same cost at that size and at
    # its largest, and what a grown GPU would cost
    sized = job_file(JOB_YAML.replace("gpus: 2", "gpus: 1\npods: 4\nmin_pods: 1\ncheckpoint_interval_s: 600"),
                     name="sized.yaml")
    result = gpup("quote", "-f", sized)
    assert result.exit_code == 0, result.output
    assert ("sizes 1..4 pods: 12 credits at 4, 12 credits grown to 4 (grown GPUs borrowed, preemptible, at the "
            "clearing price: 1500 mcr/GPU-hour now); the hold is the worst case") in result.stdout


def test_logs_of_a_job_that_has_not_started_say_so_and_fail(gpup, lab, submit):
    from quotas.models import ApprovalRule

    ApprovalRule.objects.create(department=lab.vision, gpus_above=1)
    job = submit(lab.alice, gpus=2)  # waits for approval: nothing has run
    result = gpup("logs", job.pk)
    assert result.exit_code != 0 and result.stdout == ""
    assert "logs_unavailable" in result.stderr and "has not started" in result.stderr


def test_logs_of_another_pod_of_a_gang(gpup, lab, submit):
    from scheduling.models import SimPod

    job = submit(lab.alice, command=["python", "train.py"], pods=2, gpus=1)
    run_cycle()
    SimPod.objects.filter(job_id=job.pk, index=1).update(log="rank 1 here\n")
    finish_pods()
    assert gpup("logs", "--pod", "1", job.pk).stdout == "rank 1 here\ndone\n"
    assert gpup("logs", job.pk).stdout == "$ python train.py\ndone\n"
    result = gpup("logs", "--pod", "2", job.pk)  # the job has pods 0 and 1
    assert result.exit_code == 2 and "pod: This job has pods 0 to 1." in result.stderr
    result = gpup("logs", "--pod", "-1", job.pk)
    assert result.exit_code == 2 and "--pod" in result.stderr


def test_login_stores_a_private_config_that_later_commands_use(gpup, live_server, lab, token_for, tmp_path):
    config = tmp_path / "config.toml"
    result = gpup("login", "--url", live_server.url, "--token", "gpp_1_wrong", env={"GPU_PORTAL_TOKEN": ""})
    assert result.exit_code == 4 and not config.exists()  # checked before anything is stored

    token = token_for(lab.bob)
    result = gpup("login", "--url", live_server.url, env={"GPU_PORTAL_TOKEN": ""}, input=f"{token}\n")
    assert result.exit_code == 0, result.output
    assert "as bob" in result.stdout and token not in result.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    # No URL or token in the environment now: both come from the file.
    result = gpup("whoami", env={"GPU_PORTAL_URL": "", "GPU_PORTAL_TOKEN": ""})
    assert result.exit_code == 0 and result.stdout.startswith("bob at ")
    result = gpup("whoami", env={"GPU_PORTAL_URL": "", "GPU_PORTAL_TOKEN": "",
                                 "GPU_PORTAL_CONFIG": str(tmp_path / "none.toml")})
    assert result.exit_code == 4 and "gpup login" in result.stderr


def test_completion_script():
    result = CliRunner().invoke(cli, ["completion", "bash"])
    assert result.exit_code == 0 and "_GPUP_COMPLETE=bash_complete" in result.stdout


def test_gpup_as_a_process(live_server, lab, token_for, tmp_path):
    """The real entry point in its own process, as a script would run it."""
    src = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "GPU_PORTAL_URL": live_server.url,
           "GPU_PORTAL_TOKEN": token_for(lab.alice), "GPU_PORTAL_CONFIG": str(tmp_path / "c.toml")}
    run = [sys.executable, "-m", "gpuportal.cli"]
    me = subprocess.run([*run, "--json", "whoami"], env=env, capture_output=True, text=True, timeout=60)
    assert me.returncode == 0 and json.loads(me.stdout)["username"] == "alice"
    missing = subprocess.run([*run, "get", "424242"], env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 3 and "not_found" in missing.stderr



def test_a_job_file_mounts_sources_asks_for_a_checkpoint_and_shm(gpup, job_file, lab):
    from workloads.models import DataSource

    DataSource.objects.create(name="imagenet", kind="dataset", cluster=lab.cluster, claim_name="imagenet",
                              shared_with_all=True)
    DataSource.objects.create(name="vision-scratch", cluster=lab.cluster, department=lab.vision,
                              claim_name="scratch", writable=True)
    text = JOB_YAML + "mounts:\n  - {source: imagenet, path: /data}\ncheckpoint: {source: vision-scratch}\nshm_mb: 512\n"
    result = gpup("--json", "submit", "-f", job_file(text))
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert job["mounts"] == [{"source": "imagenet", "path": "/data", "read_only": True}]
    assert job["checkpoint"]["path"] == "/checkpoint" and job["shm_mb"] == 512
    shown = gpup("get", job["id"]).stdout  # the human view names them too
    assert "/data <- imagenet (read-only)" in shown
    assert f"/checkpoint <- vision-scratch:checkpoints/job-{job['id']}" in shown
    # a mount under /proc is refused with the field named, exit code 2
    result = gpup("submit", "-f", job_file(JOB_YAML + "mounts:\n  - {source: imagenet, path: /proc/x}\n"))
    assert result.exit_code == 2 and "mounts" in result.output and "/proc" in result.output


def test_get_shows_the_attempt_of_a_requeued_or_retried_job(capsys):
    from gpuportal.cli import print_job

    job = {"id": 7, "name": "ddp", "state": "queued", "owner": "bob", "department": "vision", "pods": 2, "gpus": 4,
           "flavor": "a100-80gb", "tier": "elastic", "urgency": "normal", "image": "img", "command": ["sh"]}
    print_job(job)
    assert "attempt" not in capsys.readouterr().out  # a first attempt says nothing
    print_job({**job, "attempt": 3, "retries": 1, "preemption_count": 1,
               "checkpoint": {"path": "/ckpt", "source": "scratch", "sub_path": "checkpoints/job-7",
                              "deleted_at": "2026-01-01T00:00:00Z"}})
    out = capsys.readouterr().out
    assert "3 (1 retries, 1 preemptions)" in out and "/ckpt <- scratch:checkpoints/job-7 (deleted)" in out


def test_get_shows_the_roles_of_a_job_of_roles(capsys):
    from gpuportal.cli import print_job

    job = {"id": 8, "name": "train", "state": "queued", "owner": "bob", "department": "vision", "pods": 2,
           "gpus": 4, "flavor": "a100-80gb", "tier": "elastic", "urgency": "normal", "image": "img", "command": ["sh"]}
    print_job({**job, "roles": [{"name": "main", "pods": 2, "gpus": 4, "cpu": "16", "memory": "64Gi"}]})
    assert "roles" not in capsys.readouterr().out  # one role: the job's own size says it
    print_job({**job, "roles": [
        {"name": "trainer", "pods": 2, "gpus": 4, "cpu": "16", "memory": "64Gi", "failure_policy": "restart-attempt"},
        {"name": "data", "pods": 4, "gpus": 0, "cpu": "4", "memory": "8Gi", "failure_policy": "restart-pod"}]})
    out = capsys.readouterr().out
    assert "trainer 2 x 4 GPUs, cpu 16, memory 64Gi; data 4 x cpu 4, memory 8Gi (restart-pod)" in out


def test_get_shows_a_resizable_jobs_size_now_its_range_and_a_resize_under_way(capsys):
    from gpuportal.cli import print_job

    job = {"id": 9, "name": "llm", "state": "running", "owner": "alice", "department": "vision", "pods": 8,
           "gpus": 1, "flavor": "a100-80gb", "tier": "elastic", "urgency": "normal", "image": "img", "command": ["sh"]}
    print_job(job)
    assert "size" not in capsys.readouterr().out  # a fixed size says nothing more
    print_job({**job, "size": {"pods": 3, "min_pods": 2, "max_pods": 8, "resize": {
        "from": 3, "to": 8, "direction": "up", "reason": "idle", "state": "decided"}}})
    assert "3 of 2..8 pods (growing to 8 at its checkpoint, decided)" in capsys.readouterr().out


def test_get_shows_each_events_role(capsys):
    from gpuportal.cli import print_job

    job = {"id": 9, "name": "train", "state": "running", "owner": "bob", "department": "vision", "pods": 2,
           "gpus": 4, "flavor": "a100-80gb", "tier": "elastic", "urgency": "normal", "image": "img", "command": ["sh"],
           "events": [{"at": "2026-01-01T00:00:00Z", "kind": "transition", "from_state": "queued",
                       "to_state": "admitted", "message": "admitted", "role": ""},
                      {"at": "2026-01-01T00:05:00Z", "kind": "pod_replaced", "message": "pod 3 failed, replaced",
                       "role": "data"}]}
    print_job(job)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert "[" not in lines[0]  # an event of the whole job names no role
    assert lines[1].endswith("pod_replaced  [data]  pod 3 failed, replaced")


def test_a_job_file_and_an_array_carry_roles(gpup, job_file, lab):
    text = JOB_YAML.replace("gpus: 2\n", "") + ("roles:\n  - {name: trainer, pods: 2, gpus: 1}\n"
                                                 "  - {name: eval, pods: 1, gpus: 1, command: [python, eval.py, '{{index}}']}\n")
    result = gpup("submit", "-f", job_file(text))
    assert result.exit_code == 0, result.output
    job = _job(int(result.stdout.split()[2]))
    assert [r.name for r in job.roles.order_by("index")] == ["trainer", "eval"] and job.total_gpus == 3
    result = gpup("submit", "-f", job_file(text), "--array", "0-1")
    assert result.exit_code == 0, result.output
    from scheduling.models import Job

    tasks = Job.objects.filter(array__isnull=False).order_by("array_index")
    assert [t.roles.get(name="eval").command[-1] for t in tasks] == ["0", "1"]
    result = gpup("submit", "-f", job_file(text + "pods: 2\n"))
    assert result.exit_code == 2 and "pods" in result.output


def test_submit_within_a_topology_level(gpup, job_file, lab):
    from scheduling.models import Node

    lab.cluster.topology_levels = ["topology.kubernetes.io/rack"]
    lab.cluster.save(update_fields=["topology_levels"])
    Node.objects.filter(cluster=lab.cluster).update(labels={"gpu-type": "a100", "topology.kubernetes.io/rack": "r0"})
    result = gpup("submit", "-f", job_file(), "--require-within", "rack")
    assert result.exit_code == 0, result.output
    job = _job(int(result.stdout.split()[2]))
    assert (job.topology_level, job.topology_required) == ("topology.kubernetes.io/rack", True)
    assert "within one topology.kubernetes.io/rack (required)" in gpup("get", job.pk).stdout
    result = gpup("submit", "-f", job_file(), "--within", "row")
    assert result.exit_code != 0 and "Unknown topology level 'row'" in result.output
    result = gpup("submit", "-f", job_file(), "--within", "rack", "--require-within", "rack")
    assert result.exit_code != 0 and "not both" in result.output


def test_logs_of_a_role_by_its_rank_in_it(gpup, job_file, lab):
    from scheduling.models import SimPod

    text = JOB_YAML.replace("gpus: 2\n", "") + ("roles:\n  - {name: trainer, pods: 2, gpus: 1}\n"
                                                 "  - {name: eval, pods: 1, gpus: 1}\n")
    result = gpup("submit", "-f", job_file(text))
    assert result.exit_code == 0, result.output
    job = _job(int(result.stdout.split()[2]))
    run_cycle()
    SimPod.objects.filter(job_id=job.pk, index=2).update(log="eval here\n")
    finish_pods()
    assert gpup("logs", "--role", "eval", job.pk).stdout == "eval here\ndone\n"
    result = gpup("logs", "--role", "data", job.pk)
    assert result.exit_code == 2 and "role: This job's roles are trainer, eval." in result.stderr
    result = gpup("logs", "--role", "eval", "--pod", "1", job.pk)
    assert result.exit_code == 2 and "pod: Role eval has pods 0 to 0." in result.stderr


def test_clone_adds_data_workers_for_a_job_whose_gpus_wait_for_data(gpup, lab, submit):
    import yaml

    from quotas.models import Flavor, FlavorKind, Quota, QuotaResource
    from scheduling.models import Node

    cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    Quota.objects.create(department=lab.vision, flavor=cpu, resource=QuotaResource.CPU, nominal=32, borrowing_limit=0)
    Node.objects.create(cluster=lab.cluster, name="c0", flavor=cpu, gpus=0, cpu_millicores=16000, memory_mib=65536,
                        labels={"pool": "cpu"})
    job = submit(lab.alice, command=["python", "train.py"], pods=2, gpus=1)
    result = gpup("clone", job.pk, "--add-data-workers", "3")
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(result.stdout)
    assert "pods" not in spec and "gpus" not in spec  # its size is its roles'
    assert [(r["name"], r["pods"], r["gpus"]) for r in spec["roles"]] == [("trainer", 2, 1), ("data", 3, 0)]
    assert spec["roles"][1]["failure_policy"] == "restart-pod"
    result = gpup("clone", job.pk, "--add-data-workers", "3", "--submit")
    assert result.exit_code == 0, result.output
    clone = _job(int(result.stdout.split()[2]))
    assert [(r.name, r.pods) for r in clone.roles.order_by("index")] == [("trainer", 2), ("data", 3)]
    result = gpup("clone", clone.pk, "--add-data-workers", "2")  # a job with data workers: they grow
    assert [(r["name"], r["pods"]) for r in yaml.safe_load(result.stdout)["roles"]] == [("trainer", 2), ("data", 5)]
    assert gpup("clone", job.pk, "--add-data-workers", "0").exit_code == 2  # refused before asking


def test_a_quote_of_one_credit_says_credit(gpup, lab, job_file):
    from quotas.models import Price

    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    one = job_file(JOB_YAML.replace("gpus: 2", "gpus: 1").replace("7200", "3600"), name="one.yaml")
    result = gpup("quote", "-f", one)  # 1 GPU x 1 h x 1 credit
    assert result.exit_code == 0, result.output
    assert "at most 1 credit\n" in result.stdout
