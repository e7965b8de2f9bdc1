"""Templates from the client and gpup, against the live portal: save, list, submit from one with overrides,
clone a job, and the errors (exit code 2 for bad input)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from client_world import JOB

from gpuportal import errors
from gpuportal.cli import cli

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gpup(live_server, lab, token_for, tmp_path):
    runner = CliRunner()

    def run(*args, user=None):
        env = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": token_for(user or lab.alice),
               "GPU_PORTAL_CONFIG": str(tmp_path / "config.toml")}
        return runner.invoke(cli, list(map(str, args)), env=env, catch_exceptions=False)

    return run


def test_client_saves_lists_and_submits_from_a_template(portal, lab):
    c = portal()
    saved = c.template_save("resnet", {**JOB, "gpus": 2, "env": {"EPOCHS": "10"}}, description="r50")
    assert (saved["scope"], saved["owner"]) == ("personal", "alice")
    assert [t["name"] for t in c.templates()] == ["resnet"]
    assert c.template("resnet")["id"] == saved["id"] == c.template(saved["id"])["id"]
    job = c.submit_from_template("resnet", name="run-2", env={"EPOCHS": "20"})
    assert (job["name"], job["gpus"], job["env"]) == ("run-2", 2, {"EPOCHS": "20"})
    clone = c.submit(c.job_spec(job))
    assert (clone["name"], clone["gpus"], clone["env"]) == ("run-2", 2, {"EPOCHS": "20"})
    assert c.template_update("resnet", description="ResNet-50")["description"] == "ResNet-50"
    c.template_delete("resnet")
    assert c.templates() == []


def test_client_errors(portal, lab):
    c = portal()
    with pytest.raises(errors.ValidationError) as bad:
        c.template_save("bad", {**JOB, "gpus": 0})
    assert "spec.gpus" in bad.value.fields
    with pytest.raises(errors.ValidationError) as unknown:
        c.submit_from_template("nope")
    assert "template" in unknown.value.fields
    with pytest.raises(errors.NotFound):
        c.template("nope")
    with pytest.raises(errors.PermissionDenied):  # a researcher publishes nothing to the department
        c.template_save("shared", JOB, department=True)
    shared = portal(lab.vadmin).template_save("shared", JOB, department=True)
    with pytest.raises(errors.NotFound):  # another department's template
        portal(lab.bob).template(shared["id"])


def test_gpup_template_save_from_job_and_file_list_and_submit(gpup, lab, tmp_path):
    first = gpup("submit", "-f", _file(tmp_path, JOB), "--json")
    assert first.exit_code == 0, first.output
    job_id = json.loads(first.stdout)["id"]
    saved = gpup("template", "save", "from-job", "--from-job", job_id, "--set", "gpus=2", "-d", "cloned")
    assert saved.exit_code == 0 and "saved template from-job (personal" in saved.stdout
    assert gpup("template", "save", "from-file", "-f", _file(tmp_path, {**JOB, "tier": "backfill"})).exit_code == 0
    listed = gpup("templates")
    assert "from-job" in listed.stdout and "from-file" in listed.stdout
    assert [t["name"] for t in json.loads(gpup("templates", "--json").stdout)] == ["from-file", "from-job"]
    run = gpup("submit", "--template", "from-job", "--set", "name=run-3", "--set", "pods=2", "--json")
    assert run.exit_code == 0, run.output
    body = json.loads(run.stdout)
    assert (body["name"], body["gpus"], body["pods"]) == ("run-3", 2, 2)
    # a job file with --template holds the overrides
    over = gpup("submit", "-t", "from-file", "-f", _file(tmp_path, {"name": "from-file-run"}), "--json")
    assert json.loads(over.stdout)["tier"] == "backfill" and json.loads(over.stdout)["name"] == "from-file-run"
    shown = gpup("template", "show", "from-file")
    assert "tier: backfill" in shown.stdout
    assert gpup("template", "delete", "from-file").exit_code == 0
    assert "from-file" not in gpup("templates").stdout


@pytest.mark.parametrize("args, message", [
    (("submit",), "give a job file"),
    (("submit", "--template", "nope"), "No template named"),
    (("submit", "--template", "x", "--set", "gpus"), "FIELD=VALUE"),
    (("template", "save", "x"), "either --from-job"),
    (("template", "save", "x", "--from-job", "1", "-f", "job.yaml"), "either --from-job"),
])
def test_gpup_bad_input_exits_2(gpup, lab, args, message):
    r = gpup(*args)
    assert r.exit_code == 2, r.output
    assert message in r.stderr


def test_gpup_template_save_of_a_bad_file_says_why(gpup, tmp_path):
    r = gpup("template", "save", "bad", "-f", _file(tmp_path, {**JOB, "gpus": 0, "gpu": 1}))
    assert r.exit_code == 2 and "spec.gpus" in r.stderr and "spec.gpu" in r.stderr
    named = gpup("template", "save", "has space", "-f", _file(tmp_path, JOB))
    assert named.exit_code == 2 and "name" in named.stderr


def _file(tmp_path, spec: dict):
    path = tmp_path / f"job-{abs(hash(json.dumps(spec, sort_keys=True)))}.json"
    path.write_text(json.dumps(spec))
    return path
