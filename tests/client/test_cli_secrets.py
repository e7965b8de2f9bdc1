"""gpup and department secrets: list them, set values from stdin or the environment (never argv), a job
file's secrets: and the token warning on submit."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuportal.cli import cli
from workloads.models import DepartmentSecret

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def gpup(live_server, lab, token_for, tmp_path):
    runner = CliRunner()

    def run(*args, user=None, input=None, env=None):
        base = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": token_for(user or lab.alice),
                "GPU_PORTAL_CONFIG": str(tmp_path / "config.toml")}
        return runner.invoke(cli, list(map(str, args)), env={**base, **(env or {})}, input=input,
                             catch_exceptions=False)

    return run


def test_set_from_stdin_and_env_then_list_without_values(gpup, lab):
    r = gpup("secret", "set", "wandb", "api_key", "entity=env:WB_ENTITY", user=lab.vadmin, input=f"{TOKEN}\n",
             env={"WB_ENTITY": "lab"})
    assert r.exit_code == 0, r.output
    assert "keys api_key, entity set" in r.stdout and TOKEN not in r.output
    assert DepartmentSecret.objects.get(name="wandb").values == {"api_key": TOKEN, "entity": "lab"}
    r = gpup("secret", "set", "wandb", "api_key", user=lab.vadmin, input="rotated\n")  # rotates, replaces all
    assert r.exit_code == 0 and "version 2" in r.stdout
    assert DepartmentSecret.objects.get(name="wandb").values == {"api_key": "rotated"}
    listed = gpup("secrets")
    assert listed.exit_code == 0 and "wandb" in listed.stdout and "api_key" in listed.stdout
    assert "rotated" not in listed.stdout
    assert "rotated" not in gpup("secrets", "--json").stdout


@pytest.mark.parametrize(("args", "message"), [
    (("api_key=hf_abcdefgh",), "never given on the command line"),
    (("api_key=env:NOT_SET_ANYWHERE",), "is not set"),
    (("api_key", "api_key"), "given twice"),
    (("api_key",), "no value on stdin"),
    (("=x",), "give KEY"),
])
def test_bad_values_are_usage_errors_and_never_echoed(gpup, lab, args, message):
    r = gpup("secret", "set", "wandb", *args, user=lab.vadmin, input="")
    assert r.exit_code == 2 and message in r.stderr
    assert "hf_abcdefgh" not in r.output
    assert not DepartmentSecret.objects.exists()


def test_a_researcher_cannot_set_and_a_bad_key_is_refused_by_the_portal(gpup, lab):
    assert gpup("secret", "set", "wandb", "api_key", input="x\n").exit_code == 4
    r = gpup("secret", "set", "wandb", "bad key", user=lab.vadmin, input="x\n")
    assert r.exit_code == 2 and "values" in r.stderr


def test_a_job_file_uses_secrets_and_a_token_in_env_is_a_warning(gpup, lab, tmp_path):
    gpup("secret", "set", "wandb", "api_key", user=lab.vadmin, input=f"{TOKEN}\n")
    path = tmp_path / "job.yaml"
    path.write_text("name: r\nimage: nvcr.io/nvidia/pytorch:24.05-py3\ncommand: [python, t.py]\n"
                    "flavor: a100-80gb\ngpus: 1\nenv: {HF_TOKEN: hf_abcdefghijklmnopqrstu}\n"
                    "secrets:\n  - {secret: wandb, key: api_key, env: WANDB_API_KEY}\n")
    r = gpup("submit", "-f", path)
    assert r.exit_code == 0, r.output
    assert "warning: env HF_TOKEN looks like a Hugging Face token" in r.stderr
    job_id = r.stdout.split()[2]
    shown = gpup("get", job_id)
    assert "WANDB_API_KEY <- wandb/api_key" in shown.stdout and TOKEN not in shown.stdout
    path.write_text(path.read_text().replace("secret: wandb", "secret: nope"))
    bad = gpup("submit", "-f", path)
    assert bad.exit_code == 2 and "no such secret" in bad.stderr
