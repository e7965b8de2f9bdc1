"""The lab file's ``secrets:`` section: declared without values (each named by the environment variable
``lab apply`` reads it from), applied idempotently, rotated, pruned, exported without ever decrypting, and
every bad input refused with its line, nothing changed."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import CommandError, call_command

from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from portal.models import AuditEntry
from workloads.models import DepartmentSecret

pytestmark = pytest.mark.django_db

TOKEN = "0123456789abcdef0123456789abcdef01234567"
FILE = """\
version: 1
departments:
  - slug: vision
    name: Vision
secrets:
  - department: vision
    name: wandb
    kind: value
    values_env: {api_key: LAB_WANDB_KEY}
  - department: vision
    name: hf
    kind: reference
    reference_name: hf-token
    keys: [token]
  - department: vision
    name: registry
    kind: value
    purpose: image-pull
    registry: registry.lab.example:5000
    username: ci
    password_env: LAB_REGISTRY_PASSWORD
"""


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("LAB_WANDB_KEY", TOKEN)
    monkeypatch.setenv("LAB_REGISTRY_PASSWORD", "hunter2-but-longer")


def test_apply_reads_values_from_the_environment_and_is_idempotent(db, env):
    r = apply_lab(FILE)
    assert "+ secret vision/wandb (kind: value, purpose: env, keys: api_key)" in r.lines
    assert DepartmentSecret.objects.get(name="wandb").values == {"api_key": TOKEN}
    assert DepartmentSecret.objects.get(name="registry").values == {"password": "hunter2-but-longer"}
    assert all(TOKEN not in line for line in r.lines)
    assert apply_lab(FILE).unchanged


def test_a_new_value_in_the_environment_rotates_and_a_missing_one_keeps_the_old(db, env, monkeypatch):
    apply_lab(FILE)
    monkeypatch.setenv("LAB_WANDB_KEY", "rotated")
    r = apply_lab(FILE)
    assert r.lines == ["~ secret vision/wandb: values of api_key: rotated"]
    assert DepartmentSecret.objects.get(name="wandb").values == {"api_key": "rotated"}
    monkeypatch.delenv("LAB_WANDB_KEY")
    assert apply_lab(FILE).unchanged  # an existing secret keeps its values when its variable is not set
    assert DepartmentSecret.objects.get(name="wandb").values == {"api_key": "rotated"}


def test_export_names_variables_and_never_holds_a_value(db, env, monkeypatch):
    apply_lab(FILE)
    text = dump(export_lab())
    assert TOKEN not in text and "hunter2" not in text
    [wandb] = [s for s in yaml.safe_load(text)["secrets"] if s["name"] == "wandb"]
    assert wandb == {"department": "vision", "name": "wandb", "kind": "value",
                     "values_env": {"api_key": "SECRET_VISION_WANDB_API_KEY"}}
    # What the export names is what a fresh portal reads: export, wipe, apply with those variables, export.
    monkeypatch.setenv("SECRET_VISION_WANDB_API_KEY", TOKEN)
    monkeypatch.setenv("SECRET_VISION_REGISTRY_PASSWORD", "p")
    DepartmentSecret.objects.all().delete()
    apply_lab(text)
    assert DepartmentSecret.objects.get(name="wandb").values == {"api_key": TOKEN}
    assert dump(export_lab()) == text


def test_prune_deletes_what_the_file_does_not_declare(db, env):
    apply_lab(FILE)
    without_hf = FILE.replace("""  - department: vision
    name: hf
    kind: reference
    reference_name: hf-token
    keys: [token]
""", "")
    assert apply_lab(without_hf).unchanged  # without --prune, left alone
    r = apply_lab(without_hf, prune=True)
    assert "- secret vision/hf" in r.lines and not DepartmentSecret.objects.filter(name="hf").exists()


def test_the_audit_of_an_apply_names_keys_only(db, env):
    apply_lab(FILE)
    for entry in AuditEntry.objects.filter(action__startswith="secret."):
        assert TOKEN not in str(entry.new) + str(entry.old)


BAD = [
    ("    values_env: {api_key: LAB_WANDB_KEY}\n", "    values: {api_key: hf_abc}\n", "never written"),
    ("    password_env: LAB_REGISTRY_PASSWORD\n", "    password: hunter2\n", "never written"),
    ("    values_env: {api_key: LAB_WANDB_KEY}\n", "    values_env: {api_key: not-a-var}\n", "environment variable"),
    ("    values_env: {api_key: LAB_WANDB_KEY}\n", "    values_env: []\n", "must be a mapping"),
    ("    kind: reference\n", "    kind: magic\n", "must be one of"),
    ("  - department: vision\n    name: hf\n", "  - department: nowhere\n    name: hf\n", "no department nowhere"),
    ("    keys: [token]\n", "    keys: token\n", "must be a list"),
    ("    keys: [token]\n", "    keys: [token]\n    colour: red\n", "unknown field"),
    ("    name: hf\n", "    name: wandb\n", "declared twice"),
    ("    values_env: {api_key: LAB_WANDB_KEY}\n", "    values_env: {api_key: LAB_UNSET_VARIABLE}\n", "not set"),
    ("    name: hf\n", "    name: Bad_Name\n", "Lower-case"),
    ("    reference_name: hf-token\n", "    reference_name: portal-secret-x\n", "portal's own"),
    ("    registry: registry.lab.example:5000\n", "    registry: https://registry.lab.example\n", "without a scheme"),
]


@pytest.mark.parametrize(("old", "new", "message"), BAD)
def test_bad_secrets_are_refused_with_their_line_and_change_nothing(db, env, old, new, message):
    text = FILE.replace(old, new, 1)
    assert text != FILE
    with pytest.raises(LabFileInvalid) as info:
        apply_lab(text)
    assert any(message in str(e) and e.line for e in info.value.errors), [str(e) for e in info.value.errors]
    assert "hf_abc" not in str(info.value) and "hunter2" not in str(info.value)
    assert not DepartmentSecret.objects.exists()


def test_kind_cannot_change_in_place(db, env):
    apply_lab(FILE)
    with pytest.raises(LabFileInvalid, match="kind and purpose cannot change"):
        apply_lab(FILE.replace("    kind: reference\n    reference_name: hf-token\n    keys: [token]\n",
                               "    kind: value\n    values_env: {token: LAB_WANDB_KEY}\n"))


def test_the_command_reports_a_bad_secret_as_one_line_errors(db, env, tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text(FILE.replace("    password_env: LAB_REGISTRY_PASSWORD\n", "    password: hunter2\n"))
    err = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("lab", "apply", str(path), stdout=io.StringIO(), stderr=err)
    said = err.getvalue() + str(refused.value)  # one error is the refusal's own line, several are listed first
    assert refused.value.returncode == 2
    assert "never written" in said and "line " in said and "hunter2" not in said
