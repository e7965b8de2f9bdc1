"""The lab file's ``data_sources:`` section: read through the data sources API's input serializer, applied
idempotently by cluster and name, exported and applied back to the same file, pruned, and every bad input
refused with its line, nothing changed."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import CommandError, call_command

from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from portal.models import AuditEntry
from workloads.models import DataSource

pytestmark = pytest.mark.django_db

FILE = """\
version: 1
flavors:
  - name: a100-80gb
    node_labels: {gpu-type: a100}
clusters:
  - name: default
    default: true
    node_groups:
      - {name: sim-a100, flavor: a100-80gb, nodes: 2, gpus_per_node: 4}
departments:
  - slug: vision
    name: Vision
  - slug: nlp
    name: NLP
data_sources:
  - name: imagenet
    cluster: default
    kind: dataset
    shared_with_all: true
    claim_name: imagenet
    description: ImageNet-1k, read-only
  - name: vision-scratch
    cluster: default
    department: vision
    claim_name: vision-scratch
    writable: true
    sub_path: runs
  - name: corpus
    cluster: default
    kind: nfs
    shared_with: [vision, nlp]
    claim_name: corpus
"""


def test_apply_declares_each_source_and_a_second_apply_changes_nothing(db):
    r = apply_lab(FILE)
    assert "+ data source default/imagenet (kind: dataset, claim: imagenet, owner: platform)" in r.lines
    assert "+ data source default/vision-scratch (kind: pvc, claim: vision-scratch, owner: vision)" in r.lines
    scratch = DataSource.objects.get(name="vision-scratch")
    assert (scratch.department.slug, scratch.writable, scratch.sub_path) == ("vision", True, "runs")
    imagenet = DataSource.objects.get(name="imagenet")
    assert (imagenet.kind, imagenet.department, imagenet.shared_with_all, imagenet.writable) == (
        "dataset", None, True, False)
    assert sorted(DataSource.objects.get(name="corpus").shared_with.values_list("slug", flat=True)) == [
        "nlp", "vision"]
    assert AuditEntry.objects.filter(action="data_source.create").count() == 3
    again = apply_lab(FILE)
    assert again.unchanged, again.lines
    assert AuditEntry.objects.filter(action__startswith="data_source.").count() == 3


def test_a_changed_field_or_sharing_is_an_update(db):
    apply_lab(FILE)
    r = apply_lab(FILE.replace("    sub_path: runs\n", "    sub_path: runs2\n")
                  .replace("    shared_with: [vision, nlp]\n", "    shared_with: [nlp]\n"))
    assert sorted(r.lines) == ["~ data source default/corpus: shared_with: nlp, vision -> nlp",
                               "~ data source default/vision-scratch: sub_path: runs -> runs2"]
    assert DataSource.objects.get(name="vision-scratch").sub_path == "runs2"
    assert list(DataSource.objects.get(name="corpus").shared_with.values_list("slug", flat=True)) == ["nlp"]


def test_export_applies_back_to_the_same_file(db):
    apply_lab(FILE)
    text = dump(export_lab())
    exported = yaml.safe_load(text)["data_sources"]
    assert [(s["cluster"], s["name"]) for s in exported] == [
        ("default", "corpus"), ("default", "imagenet"), ("default", "vision-scratch")]
    assert exported[2] == {"name": "vision-scratch", "cluster": "default", "kind": "pvc", "department": "vision",
                           "claim_name": "vision-scratch", "writable": True, "sub_path": "runs"}
    assert apply_lab(text).unchanged
    DataSource.objects.all().delete()
    apply_lab(text)
    assert dump(export_lab()) == text


def test_prune_deletes_what_the_file_does_not_declare(db):
    apply_lab(FILE)
    without_corpus = FILE.split("  - name: corpus\n")[0]
    assert apply_lab(without_corpus).unchanged  # without --prune, left alone
    r = apply_lab(without_corpus, prune=True)
    assert r.lines == ["- data source default/corpus"]
    assert not DataSource.objects.filter(name="corpus").exists()


def test_the_owner_cannot_change_in_place(db):
    apply_lab(FILE)
    with pytest.raises(LabFileInvalid, match="owner cannot change") as info:
        apply_lab(FILE.replace("    department: vision\n", "    department: nlp\n"))
    assert info.value.errors[0].line == FILE.splitlines().index("    department: vision") + 1
    assert DataSource.objects.get(name="vision-scratch").department.slug == "vision"


BAD = [
    ("    claim_name: corpus\n", "", "claim_name is required"),
    ("    cluster: default\n    kind: nfs\n", "    cluster: nowhere\n    kind: nfs\n", "no cluster nowhere"),
    ("    department: vision\n", "    department: physics\n", "no department physics"),
    ("    shared_with: [vision, nlp]\n", "    shared_with: [vision, chem]\n", "no department chem"),
    ("    shared_with: [vision, nlp]\n", "    shared_with: vision\n", "must be a list"),
    ("    kind: nfs\n", "    kind: ceph\n", "must be one of"),
    ("    claim_name: corpus\n", "    claim_name: corpus\n    colour: red\n", "unknown field"),
    ("    claim_name: corpus\n", "    claim_name: Not_A_Claim\n", "DNS-1123"),
    ("    sub_path: runs\n", "    sub_path: ../etc\n", "no '..'"),
    ("    shared_with_all: true\n", "    shared_with_all: true\n    writable: true\n", "read-only"),
    ("  - name: corpus\n", "  - name: imagenet\n", "declared twice"),
    ("  - name: corpus\n", "  - name: Corpus Data\n", "slug"),
]


@pytest.mark.parametrize(("old", "new", "message"), BAD)
def test_bad_sources_are_refused_with_their_line_and_change_nothing(db, old, new, message):
    text = FILE.replace(old, new, 1)
    assert text != FILE
    with pytest.raises(LabFileInvalid) as info:
        apply_lab(text)
    assert any(message in str(e) and e.line for e in info.value.errors), [str(e) for e in info.value.errors]
    assert not DataSource.objects.exists()


def test_a_section_that_is_not_a_list_is_refused(db):
    with pytest.raises(LabFileInvalid, match="data_sources: must be a list"):
        apply_lab("version: 1\ndata_sources: {imagenet: x}\n")


def test_the_command_refuses_a_bad_source_in_one_line(db, tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text(FILE.replace("    department: vision\n", "    department: physics\n"))
    err = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("lab", "apply", str(path), stdout=io.StringIO(), stderr=err)
    assert refused.value.returncode == 2
    assert "no department physics" in err.getvalue() + str(refused.value)
