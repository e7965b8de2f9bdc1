"""``manage.py lab apply|export``: idempotent, a kubectl-style diff, every error listed with its line and
nothing changed on error, and a lossless export."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import transaction
from django.utils import timezone

from lab import demo
from lab.services import shape
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from portal.models import AuditEntry, Department, Membership
from quotas.models import ApprovalRule, Flavor, Price, Quota, RefillRule, Wallet
from scheduling.models import Cluster, Job, JobState, Node, PolicyVersion

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()


def _cmd(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("lab", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _file(tmp_path, text: str) -> str:
    p = tmp_path / "lab.yaml"
    p.write_text(text)
    return str(p)


def test_apply_creates_the_lab_and_a_second_apply_changes_nothing(tmp_path):
    path = _file(tmp_path, DEMO)
    out, _ = _cmd("apply", path)
    assert "+ department vision (name: Computer Vision)" in out and "Applied" in out
    assert Department.objects.count() == 4 and Membership.objects.count() == 6
    assert sorted(Node.objects.values_list("name", "gpus")) == [("sim-a100-0", 4), ("sim-a100-1", 4)]
    assert Quota.objects.get(department__slug="robotics").lending_limit == 1
    assert Price.objects.count() == 3 and Wallet.objects.get(department__slug="vision").balance == 200_000
    assert RefillRule.objects.get(department__slug="vision").mode == "per_nominal_gpu"
    assert ApprovalRule.objects.get(department__slug="robotics").realtime is True
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.get(username="alice").has_usable_password()
    entries = AuditEntry.objects.count()
    out, _ = _cmd("apply", path)
    assert "No changes: the lab already matches" in out
    assert AuditEntry.objects.count() == entries


def test_dry_run_prints_the_diff_and_changes_nothing(tmp_path):
    apply_lab(DEMO)
    changed = DEMO.replace("name: Language Models", "name: Large Language Models").replace(
        "a100-80gb: {nominal: 3, borrowing_limit: 2, lending_limit: null}",
        "a100-80gb: {nominal: 2, borrowing_limit: 2, lending_limit: 1}").replace(
        "{user: dave, email: dave@lab.example, role: researcher, tier: standard}",
        "{user: dave, email: dave@lab.example, role: researcher, tier: senior}")
    out, _ = _cmd("apply", _file(tmp_path, changed), "--dry-run")
    assert "~ department nlp: name: Language Models -> Large Language Models" in out
    assert "~ quota nlp/a100-80gb: nominal: 3 -> 2; lending_limit: null -> 1" in out
    assert "~ member nlp/dave: user_tier: standard -> senior" in out
    assert "Dry run: 0 to create, 3 to change, 0 to remove. Nothing was changed." in out
    assert Department.objects.get(slug="nlp").name == "Language Models"
    assert Quota.objects.get(department__slug="nlp").nominal == 3
    _cmd("apply", _file(tmp_path, changed))
    assert Quota.objects.get(department__slug="nlp").nominal == 2
    assert AuditEntry.objects.filter(action="quota.set", comment__startswith="lab file").count() == 1


def test_prune_removes_what_the_file_no_longer_declares(tmp_path, submit):
    apply_lab(DEMO)
    data = yaml.safe_load(DEMO)
    data["departments"] = [d for d in data["departments"] if d["slug"] != "robotics"]
    data["departments"][0]["members"] = data["departments"][0]["members"][:1]  # bob leaves vision
    data["departments"][0]["teams"][0]["members"] = []  # ... and his team
    data["prices"]["a100-80gb"].pop("backfill")
    text = dump(data)
    out, _ = _cmd("apply", _file(tmp_path, text), "--dry-run")
    assert "No changes" in out  # without --prune what the file does not mention is left alone
    out, _ = _cmd("apply", _file(tmp_path, text), "--prune", "--dry-run")
    assert "- member vision/bob" in out and "- department robotics" in out and "- price a100-80gb/backfill" in out
    _cmd("apply", _file(tmp_path, text), "--prune")
    assert Department.objects.get(slug="robotics").archived_at is not None  # archived, history kept
    assert not Membership.objects.filter(user__username="bob").exists()
    assert not Price.objects.filter(tier="backfill").exists()
    out, _ = _cmd("apply", _file(tmp_path, text), "--prune")
    assert "No changes" in out


def test_every_error_is_listed_with_its_line_and_nothing_changes(tmp_path):
    apply_lab(DEMO)
    before = (Department.objects.count(), AuditEntry.objects.count(), Quota.objects.get(
        department__slug="vision").nominal)
    bad = """version: 1
flavors:
  - name: h100
    resource_name: not a resource
departments:
  - slug: bio
    name: Biology
  - slug: prices
    name: Prices
    members:
      - {user: zed, tier: gold}
  - slug: vision
    name: Computer Vision
    quotas:
      a100-80gb: {nominal: 9}
      b200: {nominal: 1, lending_limit: 2}
"""
    with pytest.raises(CommandError):
        _cmd("apply", _file(tmp_path, bad))
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(bad)
    found = {(e.line, ".".join(map(str, e.path))) for e in exc.value.errors}
    assert {(4, "flavors.0.resource_name"), (8, "departments.1.slug"), (11, "departments.1.members.0.tier"),
            (16, "departments.2.quotas.b200"), (16, "departments.2.quotas.b200.lending_limit")} <= found
    after = (Department.objects.count(), AuditEntry.objects.count(), Quota.objects.get(
        department__slug="vision").nominal)
    assert after == before and not Department.objects.filter(slug="bio").exists()


def test_errors_found_while_applying_roll_everything_back(tmp_path):
    apply_lab(DEMO)
    text = DEMO.replace("name: Robotics", "name: Robots").replace(
        "a100-80gb: {nominal: 4, borrowing_limit: 4, lending_limit: null}", "a100-80gb: {nominal: 9}")
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(text)
    [err] = exc.value.errors
    line = text.splitlines().index("      a100-80gb: {nominal: 9}") + 1
    assert err.path[-1] == "nominal" and "oversubscribed" in err.message and err.line == line
    assert Department.objects.get(slug="robotics").name == "Robotics"  # applied before the error: undone
    text = text.replace("a100-80gb: {nominal: 9}", "a100-80gb: {nominal: 9, oversubscribe: true}")
    apply_lab(text)
    assert Quota.objects.get(department__slug="vision").nominal == 9
    assert AuditEntry.objects.get(action="quota.set").new["oversubscribed"] is True


def test_syntax_errors_and_bad_policies_are_refused_with_lines(tmp_path):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab("version: 1\ndepartments:\n  - slug: [unclosed\n")
    assert exc.value.errors[0].line is not None and "not valid YAML" in exc.value.errors[0].message
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab("version: 1\npolicy:\n  aging_per_minute: -5\n  nonsense: 1\n")
    assert {(e.line, e.path) for e in exc.value.errors} >= {(3, ("policy", "aging_per_minute")),
                                                            (4, ("policy", "nonsense"))}, exc.value.errors
    assert not PolicyVersion.objects.exists()
    with pytest.raises(LabFileInvalid):
        apply_lab("- just\n- a list\n")


def test_sso_groups_must_name_a_declared_department():
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab("version: 1\nsso:\n  groups:\n    - {group: g, department: nowhere, role: boss}\n")
    assert {(e.line, e.path[-1]) for e in exc.value.errors} == {(4, "department"), (4, "role")}


def test_the_policy_is_applied_once(tmp_path):
    apply_lab("version: 1\npolicy:\n  aging_per_minute: 0.5\n")
    assert PolicyVersion.objects.count() == 1
    assert apply_lab("version: 1\npolicy:\n  aging_per_minute: 0.5\n").unchanged
    assert PolicyVersion.objects.count() == 1


def test_archiving_from_the_file_cancels_waiting_jobs(tmp_path):
    apply_lab(DEMO)
    demo._passwords()
    from django.contrib.auth import get_user_model

    from scheduling.services.jobs import job_submit

    job, _ = job_submit(user=get_user_model().objects.get(username="erin"), data={
        "name": "x", "image": "i", "command": ["true"], "flavor": Flavor.objects.get(), "gpus_per_pod": 1})
    out = apply_lab(DEMO.replace("name: Robotics\n", "name: Robotics\n    archived: true\n"))
    assert any("1 waiting job(s) cancelled" in line for line in out.lines)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_export_then_apply_on_an_empty_database_gives_the_same_file(tmp_path):
    with transaction.atomic():
        apply_lab(DEMO)
        # a lab that has lived a little: a MIG flavor, a second cluster, an oversubscribed quota, an archived
        # department, an edited policy
        apply_lab(DEMO.replace("flavors:\n", "flavors:\n  - {name: a100-mig-3g.40gb, resource_name: "
                                             "nvidia.com/mig-3g.40gb}\n")
                  .replace("clusters:\n", "clusters:\n  - {name: edge, backend: kubernetes}\n")
                  .replace("a100-80gb: {nominal: 1, borrowing_limit: 2, lending_limit: 1}",
                           "a100-80gb: {nominal: 2, borrowing_limit: 2, lending_limit: 1, oversubscribe: true}")
                  .replace("name: Platform team\n", "name: Platform team\n    archived: true\n")
                  + "policy:\n  aging_per_minute: 0.25\n"
                  + "sso:\n  groups:\n    - {group: cv-leads, department: vision, role: department_admin, "
                    "tier: pi}\n")
        first = dump(export_lab())
        out, _ = _cmd("export")
        assert out == first
        transaction.set_rollback(True)
    assert not Department.objects.exists() and not Cluster.objects.exists()
    apply_lab(first)
    assert dump(export_lab()) == first
    assert apply_lab(first).unchanged
    exported = yaml.safe_load(first)
    assert {"name": "edge", "backend": "kubernetes"} in exported["clusters"]
    assert [d["slug"] for d in exported["departments"] if d.get("archived")] == ["platform"]
    assert exported["policy"]["aging_per_minute"] == 0.25
    assert exported["sso"]["groups"] == [{"group": "cv-leads", "department": "vision", "role": "department_admin",
                                          "tier": "pi"}]


def test_the_actor_must_be_a_platform_admin(tmp_path, lab):
    with pytest.raises(CommandError, match="no such platform admin"):
        _cmd("apply", _file(tmp_path, "version: 1\n"), "--actor", "vadmin")
    out, _ = _cmd("apply", _file(tmp_path, "version: 1\nflavors:\n  - {name: h100}\n"), "--actor", "root")
    assert AuditEntry.objects.get(action="flavor.create").actor == lab.root


def test_the_demo_seeds_through_the_lab_file_and_is_idempotent(settings, tmp_path):
    settings.DATA_DIR = str(tmp_path)
    creds = demo.seed()
    assert set(creds) == {u for u, *_ in demo.USERS} and Job.objects.count() == 13 + demo.HISTORY_JOBS
    # the week before, finished, for the policy tuner to replay (docs/policy-tuning.md)
    week = Job.objects.filter(name__startswith=demo.HISTORY_PREFIX)
    assert week.count() == week.filter(state="succeeded", finished_at__lte=timezone.now()).count() == 180
    assert week.filter(tier="realtime").exists() and all(j.roles.count() == 1 for j in week[:5])
    # alice's notebook: a session of the lab's JupyterLab image, to open from its page (docs/sessions.md)
    notebook = Job.objects.get(name="notebook")
    assert (notebook.kind, notebook.session_image, notebook.tier, notebook.owner.username) == (
        "session", "jupyterlab", "realtime", "alice")
    assert AuditEntry.objects.filter(action="department.create").count() == 4
    # two simulated clusters of different flavors, the campus cluster's CPU pool (docs/workloads.md, "Shapes")
    # and its node of shared GPUs (docs/fractions.md); the H100 job that requires the cloud's label runs there
    assert sorted(Node.objects.values_list("cluster__name", "flavor__name")) == [
        ("cloud", "h100"), ("default", "a100-80gb"), ("default", "a100-80gb"), ("default", "a100-shared"),
        ("default", "cpu"), ("default", "cpu")]
    assert Job.objects.get(name="llm-pretrain-h100").cluster_selector == {"site": "cloud"}
    from scheduling.services.cycle import run_cycle

    run_cycle()
    assert Job.objects.get(name="llm-pretrain-h100").cluster.name == "cloud"
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.get(username="admin")
    assert admin.check_password(creds["admin"]) and admin.is_staff
    Quota.objects.filter(department__slug="nlp", flavor__name="a100-80gb").update(nominal=2)  # changed since
    again = demo.seed()
    assert again == creds and Job.objects.count() == 13 + demo.HISTORY_JOBS
    assert Quota.objects.get(department__slug="nlp", flavor__name="a100-80gb").nominal == 2
    assert Path(demo.credentials_path()).exists()


# ------------------------------------------------------------------------------------------ per-cluster quotas

EDGE = ("clusters:\n  - name: edge\n    backend: simulated\n    node_groups:\n"
        "      - {name: edge-a100, flavor: a100-80gb, nodes: 1, gpus_per_node: 4}\n")


def _with_edge_quota(quota: str) -> str:
    return DEMO.replace("clusters:\n", EDGE, 1).replace(
        "      a100-80gb: {nominal: 4, borrowing_limit: 4, lending_limit: null}\n",
        "      a100-80gb: {nominal: 4, borrowing_limit: 4, lending_limit: null}\n" + quota, 1)


def test_per_cluster_quotas_apply_export_and_prune(tmp_path):
    text = _with_edge_quota("      a100-80gb@edge: {nominal: 2, borrowing_limit: 0}\n")
    r = apply_lab(text)
    assert "+ quota vision/a100-80gb@edge" in "\n".join(r.lines)
    q = Quota.objects.select_related("cluster").get(department__slug="vision", cluster__isnull=False)
    assert (q.cluster.name, q.nominal, q.borrowing_limit) == ("edge", 2, 0)
    assert apply_lab(text).unchanged
    exported = dump(export_lab())
    vision = next(d for d in yaml.safe_load(exported)["departments"] if d["slug"] == "vision")
    assert vision["quotas"] == {
        "a100-80gb": {"nominal": 4, "borrowing_limit": 4, "lending_limit": None},
        "a100-80gb@edge": {"nominal": 2, "borrowing_limit": 0, "lending_limit": None}}
    # the exported file recreates the quotas as they were
    with transaction.atomic():
        Quota.objects.all().delete()
        assert apply_lab(exported).created > 0 and dump(export_lab()) == exported
        transaction.set_rollback(True)
    # a changed one is changed in place; one the file drops is removed with --prune only
    apply_lab(text.replace("a100-80gb@edge: {nominal: 2,", "a100-80gb@edge: {nominal: 3,"))
    assert Quota.objects.get(pk=q.pk).nominal == 3
    assert apply_lab(DEMO.replace("clusters:\n", EDGE, 1)).unchanged
    out, _ = _cmd("apply", _file(tmp_path, DEMO.replace("clusters:\n", EDGE, 1)), "--prune")
    assert "- quota vision/a100-80gb@edge" in out
    assert not Quota.objects.filter(cluster__isnull=False).exists()
    assert Quota.objects.filter(department__slug="vision", cluster__isnull=True).exists()


@pytest.mark.parametrize(("quota", "message"), [
    ("a100-80gb@nowhere: {nominal: 1}", "no cluster 'nowhere'"),
    ("b200@edge: {nominal: 1}", "no flavor b200"),
    ("a100-80gb@: {nominal: 1}", "no cluster ''"),
])
def test_bad_per_cluster_quota_keys_are_errors_with_their_line(quota, message):
    text = _with_edge_quota(f"      {quota}\n")
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(text)
    key = quota.split(":")[0]
    assert any(e.path == ("departments", 0, "quotas", key) and message in e.message and e.line
               for e in exc.value.errors), exc.value.errors
    assert not Department.objects.exists()


def test_a_per_cluster_quota_above_its_clusters_gpus_rolls_everything_back():
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_with_edge_quota("      a100-80gb@edge: {nominal: 5}\n"))
    assert any("cluster edge has 4" in e.message for e in exc.value.errors), exc.value.errors
    assert not Department.objects.exists() and not Cluster.objects.exists()
    apply_lab(_with_edge_quota("      a100-80gb@edge: {nominal: 5, oversubscribe: true}\n"))
    assert "oversubscribe: true" in dump(export_lab())


# ------------------------------------------------------------------------------------------ hostile files
# Each refusal is one line and exit code 2, before the file can cost memory or time.

def _refusal(*args) -> str:
    with pytest.raises(CommandError) as exc:
        _cmd(*args)
    assert exc.value.returncode == 2
    message = str(exc.value)
    assert "\n" not in message, message
    return message


def _alias_bomb() -> str:
    """The billion laughs: nine levels of nine aliases, a few hundred bytes that expand to 9**9 strings."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    return text


@pytest.fixture(params=shape.LOADERS, ids=lambda c: c.__name__)
def loader_class(request):
    """Every YAML loader the portal may use (libyaml's when installed, and the pure-Python one)."""
    return request.param


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path, loader_class):
    text = _alias_bomb()
    assert len(text) < 600
    assert "anchors (&a) are not allowed" in _refusal("apply", _file(tmp_path, text))
    with pytest.raises(LabFileInvalid) as exc:
        shape.load(text, loader_class=loader_class)
    assert [(e.line, e.message) for e in exc.value.errors] == [
        (1, "YAML anchors (&a) are not allowed in a lab file: write the value out")]
    with pytest.raises(LabFileInvalid) as exc:  # an alias alone (to nothing) is refused as such
        shape.load("version: 1\nflavors: *x\n", loader_class=loader_class)
    assert [(e.line, e.message) for e in exc.value.errors] == [
        (2, "YAML aliases (*x) are not allowed in a lab file: write the value out")]


def test_deep_nesting_is_refused_without_a_recursion_error(tmp_path, loader_class):
    deep = "a: " + "[" * 20_000 + "]" * 20_000 + "\n"
    assert "nest" in _refusal("apply", _file(tmp_path, deep))
    with pytest.raises(LabFileInvalid) as exc:
        shape.load(deep, loader_class=loader_class)
    assert "nest" in exc.value.errors[0].message
    # the cap is the portal's own, in block style too: 21 levels are refused on their line, 20 are read
    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(shape.MAX_DEPTH)) + "  " * shape.MAX_DEPTH + "- 1\n"
    with pytest.raises(LabFileInvalid) as exc:
        shape.load(block, loader_class=loader_class)
    assert [(e.line, e.message) for e in exc.value.errors] == [(shape.MAX_DEPTH + 1, "nested more than 20 levels deep")]
    data, _ = shape.load(block.replace("- 1\n", "1\n"), loader_class=loader_class)
    assert "k0" in data


def test_a_file_that_is_not_utf8_is_refused_with_its_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("version: 1\ndepartments:\n  - {slug: caf, name: Caf\xe9}\n".encode("latin-1"))
    message = _refusal("apply", str(path))
    assert "line 3" in message and "not UTF-8: byte 0xe9" in message and "save the file as UTF-8" in message
    assert not Department.objects.exists()
    # UTF-8, with or without a byte-order mark, is read
    path.write_bytes("\ufeffversion: 1\nflavors:\n  - {name: h100, description: Caf\xe9}\n".encode())
    _cmd("apply", str(path))
    assert Flavor.objects.get().description == "Caf\xe9"


def test_a_10_mb_file_is_refused_by_its_size_before_it_is_parsed(tmp_path):
    line = b"  - {slug: dept, name: Department}\n"
    head = b"version: 1\ndepartments:\n" + line * (shape.max_bytes() // len(line))
    path = tmp_path / "big.yaml"
    path.write_bytes(head + b"\xff" * (10 * 1024 * 1024 - len(head)))  # not UTF-8 past the limit: never decoded
    message = _refusal("apply", str(path))
    assert f"the file is {10 * 1024 * 1024} bytes; a lab file may be at most 1048576 bytes" in message
    with pytest.raises(LabFileInvalid, match="more than 1048576 bytes"):
        apply_lab(path.read_bytes().decode("utf-8", "replace"))


def test_the_size_limit_is_a_setting(tmp_path, settings):
    settings.LAB_FILE_MAX_KB = 1
    text = "version: 1\nflavors:\n" + "".join(f"  - {{name: f{i}}}\n" for i in range(80))
    assert 1024 < len(text) < 2048
    assert "at most 1024 bytes (LAB_FILE_MAX_KB)" in _refusal("apply", _file(tmp_path, text))
    settings.LAB_FILE_MAX_KB = 2
    _cmd("apply", _file(tmp_path, text))
    assert Flavor.objects.count() == 80


def test_standard_input_has_the_same_limits(tmp_path, monkeypatch, settings):
    settings.LAB_FILE_MAX_KB = 1
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"#" * 5000)))
    assert "more than 1024 bytes" in _refusal("apply", "-")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"version: 1\nflavors:\n  - {name: \xe9}\n")))
    assert "not UTF-8" in _refusal("apply", "-")


@pytest.mark.parametrize(("text", "message"), [
    ("version: " + "9" * 5000 + "\n", "not valid YAML: Exceeds the limit (4300 digits)"),
    ("version: 1\nflavors: \x00\n", "not valid YAML: the character #x0000 is not allowed"),
    ("departments: [" + "1," * shape.MAX_NODES + "1]\n", f"more than {shape.MAX_NODES} values"),
])
def test_other_hostile_values_are_one_line_errors(tmp_path, loader_class, text, message):
    with pytest.raises(LabFileInvalid) as exc:
        shape.load(text, loader_class=loader_class)
    [err] = exc.value.errors
    assert message in err.message and "\n" not in str(err)
    assert message in _refusal("apply", _file(tmp_path, text))


def test_a_file_with_many_errors_lists_the_first_hundred(tmp_path):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab("departments:\n" + "  - {}\n" * 300)
    errors = exc.value.errors
    assert len(errors) == shape.MAX_ERRORS + 1 and errors[-1].message == "500 more error(s) not listed"


def test_a_single_error_is_one_line_and_several_exit_2_too(tmp_path):
    message = _refusal("apply", _file(tmp_path, "version: 2\n"))
    assert message.endswith("refused, nothing was changed: line 1: version: this portal reads lab files of version 1")
    assert _refusal("apply", _file(tmp_path, "version: 2\nflavors: 3\n")).endswith("is invalid: 2 error(s).")
    # sections of the wrong type are errors, not a TypeError from the lookups of declared names
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab("flavors: [{name: [1]}]\nclusters: {a: 1}\ndepartments: 7\n")
    assert {e.path for e in exc.value.errors} == {("flavors", 0, "name"), ("clusters",), ("departments",)}
    assert _refusal("apply", str(tmp_path / "missing.yaml")).startswith("Cannot read")


def _manage(tmp_path, *args):
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "DATA_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/fresh.sqlite3",
           "CELERY_BROKER_URL": "memory://"}
    return subprocess.run([sys.executable, "manage.py", "lab", *args], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[2], timeout=600)


def test_on_a_fresh_install_the_command_says_to_migrate_or_migrates(tmp_path):
    path = _file(tmp_path, DEMO)
    r = _manage(tmp_path, "apply", path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]  # one line, no traceback
    assert "run `manage.py migrate` first (or pass --migrate to apply)" in r.stderr
    assert _manage(tmp_path, "export").returncode == 2
    r = _manage(tmp_path, "apply", path, "--migrate")
    assert r.returncode == 0, r.stderr
    assert "Applied" in r.stdout
    r = _manage(tmp_path, "apply", path)
    assert r.returncode == 0 and "No changes" in r.stdout, r.stderr
