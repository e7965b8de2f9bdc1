"""A cluster's topology levels in the lab file (applied, exported, refused when malformed) and on the clusters
page."""

from __future__ import annotations

import pytest
import yaml

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from scheduling.models import Cluster

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()
LEVELS = ["topology.kubernetes.io/rack", "kubernetes.io/hostname"]
RACKED = DEMO.replace("    default: true\n", "    default: true\n    topology_levels: [topology.kubernetes.io/rack, "
                                              "kubernetes.io/hostname]\n", 1)


def test_the_lab_file_declares_levels_and_exports_them():
    assert RACKED != DEMO
    apply_lab(RACKED)
    assert Cluster.objects.get(name="default").topology_levels == LEVELS
    assert apply_lab(RACKED).unchanged
    exported = yaml.safe_load(dump(export_lab()))
    assert exported["clusters"][0]["topology_levels"] == LEVELS


def test_malformed_levels_are_refused_with_their_line():
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(RACKED.replace("kubernetes.io/hostname]", "topology.kubernetes.io/rack]", 1))
    assert "topology_levels" in str(exc.value) and "Each level once" in str(exc.value)
    assert Cluster.objects.filter(topology_levels=[]).count() == Cluster.objects.count()


def test_the_clusters_page_sets_the_levels(lab):
    from django.test import Client

    c = Client()
    c.force_login(lab.root)
    assert "Topology levels" in c.get("/lab/clusters/").content.decode()
    r = c.post("/lab/clusters/", {"action": "topology", "cluster": "default",
                                  "topology_levels": "topology.kubernetes.io/rack, kubernetes.io/hostname"})
    assert r.status_code == 302, r.content.decode()[-800:]
    assert Cluster.objects.get(name="default").topology_levels == LEVELS
    r = c.post("/lab/clusters/", {"action": "topology", "cluster": "default", "topology_levels": "bad key/x"})
    assert r.status_code == 400 and "not a label key" in r.content.decode()
    assert Cluster.objects.get(name="default").topology_levels == LEVELS


def test_a_template_in_the_lab_file_names_a_level():
    from scheduling.models import JobTemplate

    # the demo's ddp-resnet template is a gang of 2 pods x 4 GPUs over the two 4-GPU nodes: preferring one rack
    # is taken; requiring one node can never fit, and the file says so at the template's spec
    text = RACKED.replace("      gpus: 4\n", "      gpus: 4\n      topology_level: rack\n", 1)
    apply_lab(text)
    spec = JobTemplate.objects.get(name="ddp-resnet").spec
    assert spec["topology_level"] == "rack"  # as written: a submission from it resolves the level then
    bad = RACKED.replace("      gpus: 4\n", "      gpus: 4\n      topology_level: hostname\n"
                                            "      topology_required: true\n", 1)
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(bad)
    assert "never fit in one node" in str(exc.value)
