"""Department job templates in the lab file: declared, checked as submissions, applied idempotently, pruned,
exported."""

from __future__ import annotations

import pytest
import yaml

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from portal.models import AuditEntry
from scheduling.models import JobTemplate
from scheduling.services.templates import template_create

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()
TEMPLATES = """templates:
  - department: vision
    name: resnet50
    description: ResNet-50 on one A100
    spec:
      name: resnet50
      image: nvcr.io/nvidia/pytorch:24.05-py3
      command: [python, train.py, --arch, resnet50]
      flavor: a100-80gb
      gpus: 1
      env: {EPOCHS: "90"}
  - department: nlp
    name: bert
    spec: {name: bert, image: busybox, command: ["true"], flavor: a100-80gb, gpus: 2, tier: backfill}
"""


def _errors(text):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(text)
    return {(e.line, ".".join(map(str, e.path))): e.message for e in exc.value.errors}


def test_templates_apply_idempotently_change_and_prune():
    result = apply_lab(DEMO + TEMPLATES)
    assert "+ template vision/resnet50 (image: nvcr.io/nvidia/pytorch:24.05-py3)" in result.lines
    t = JobTemplate.objects.get(name="resnet50")
    assert (t.scope, t.department.slug, t.owner, t.spec["env"]) == ("department", "vision", None, {"EPOCHS": "90"})
    assert apply_lab(DEMO + TEMPLATES).unchanged
    changed = apply_lab(DEMO + TEMPLATES.replace("gpus: 2, tier", "gpus: 3, tier"))
    assert any(line.startswith("~ template nlp/bert") and "spec.gpus: 2 -> 3" in line for line in changed.lines)
    assert JobTemplate.objects.get(name="bert").spec["gpus"] == 3
    # prune removes department templates the file no longer declares, never anyone's personal template
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get(username="alice")
    template_create(user=alice, name="mine", spec={"name": "x", "image": "busybox", "command": ["true"],
                                                   "flavor": "a100-80gb", "gpus": 1})
    only_vision = DEMO + TEMPLATES.split("  - department: nlp")[0]
    assert "- template nlp/bert" in apply_lab(only_vision, prune=True).lines
    assert sorted(JobTemplate.objects.values_list("name", flat=True)) == ["mine", "resnet50"]
    assert AuditEntry.objects.filter(action="template.delete").count() == 1


def test_a_spec_that_would_not_submit_is_an_error_at_its_line_and_nothing_changes():
    apply_lab(DEMO)
    before = AuditEntry.objects.count()
    bad = TEMPLATES.replace("      gpus: 1\n", "      gpus: 0\n      gpu: 2\n").replace(
        "flavor: a100-80gb, gpus: 2", "flavor: h100, gpus: 2")
    found = _errors(DEMO + bad)
    keys = {k for _, k in found}
    assert {"templates.0.spec.gpus", "templates.0.spec.gpu", "templates.1.spec.flavor"} <= keys
    line = {k: line for line, k in found}
    assert line["templates.0.spec.gpus"] == len(DEMO.splitlines()) + 10  # the line of "gpus: 0"
    assert "Unknown field 'gpu'" in " ".join(m for (_, k), m in found.items() if k == "templates.0.spec.gpu")
    assert not JobTemplate.objects.filter(name__in=["resnet50", "bert"]).exists()  # the demo's own are kept
    assert AuditEntry.objects.count() == before


@pytest.mark.parametrize("entry, path, message", [
    ("{department: vision, name: has space, spec: {}}", "templates.0.name", "Letters"),
    ("{department: nowhere, name: x, spec: {}}", "templates.0.department", "no department nowhere"),
    ("{department: vision, name: x, spec: [1]}", "templates.0.spec", "must be a mapping"),
    ("{department: vision, name: x}", "templates.0", "spec is required"),
    ("{department: vision, name: x, spec: {}, owner: alice}", "templates.0.owner", "unknown"),
])
def test_bad_template_entries_are_shape_errors(entry, path, message):
    found = _errors(DEMO + f"templates:\n  - {entry}\n")
    assert any(k == path and message.lower() in m.lower() for (_, k), m in found.items()), found


def test_a_template_declared_twice_is_an_error():
    entry = "  - {department: vision, name: x, spec: {name: x, image: busybox, command: [a], flavor: a100-80gb, gpus: 1}}\n"
    found = _errors(DEMO + "templates:\n" + entry + entry)
    assert any(k == "templates.1.name" and "twice" in m for (_, k), m in found.items())


def test_export_round_trips_department_templates_only():
    apply_lab(DEMO + TEMPLATES)
    from django.contrib.auth import get_user_model

    template_create(user=get_user_model().objects.get(username="alice"), name="mine", spec={
        "name": "x", "image": "busybox", "command": ["true"], "flavor": "a100-80gb", "gpus": 1})
    first = dump(export_lab())
    exported = yaml.safe_load(first)
    assert [(t["department"], t["name"]) for t in exported["templates"]] == [("nlp", "bert"), ("vision", "resnet50")]
    assert apply_lab(first).unchanged
