"""CPU work on GPU nodes in the lab file: a cluster's ``cpu_on_gpu_nodes`` (the CPU pool) and its reserve per
GPU, and a GPU group's cores and memory; applied, exported back, and refused at their path when wrong."""

from __future__ import annotations

import pytest

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from scheduling.models import Cluster, Node

pytestmark = pytest.mark.django_db

POOL = """
  - name: cpu
    kind: cpu
    resource_name: cpu
    node_labels: {pool: cpu}
"""
SWITCH = """    cpu_on_gpu_nodes: cpu
    gpu_reserve_cores: 6
    gpu_reserve_memory_gib: 48
"""


def _lab(switch: str = SWITCH, sizes: str = "        cores: 64\n        memory_gib: 512\n") -> str:
    text = demo.LAB_FILE.read_text()
    text = text.replace("\nclusters:", POOL + "\nclusters:", 1)
    text = text.replace("        gpus_per_node: 4\n", "        gpus_per_node: 4\n" + sizes, 1)
    return text.replace("    default: true\n", "    default: true\n" + switch, 1)


def test_the_switch_and_the_gpu_nodes_sizes_are_applied_exported_and_stable():
    apply_lab(_lab())
    c = Cluster.objects.get(is_default=True)
    assert (c.cpu_on_gpu_nodes.name, c.gpu_reserve_cores, c.gpu_reserve_memory_gib) == ("cpu", 6, 48)
    gpu = Node.objects.filter(cluster=c, flavor__name="a100-80gb")
    assert gpu and {(n.cpu_millicores, n.memory_mib) for n in gpu} == {(64_000, 512 * 1024)}
    exported = dump(export_lab())
    assert "cpu_on_gpu_nodes: cpu" in exported and "gpu_reserve_cores: 6" in exported
    assert "cores: 64" in exported
    Cluster.objects.filter(pk=c.pk).update(cpu_on_gpu_nodes=None)
    assert apply_lab(exported.replace("cpu_on_gpu_nodes: cpu", "cpu_on_gpu_nodes: null")).unchanged
    apply_lab(exported)
    assert apply_lab(exported).unchanged


def test_off_by_default_and_switched_off_again():
    apply_lab(_lab(switch=""))
    assert Cluster.objects.get(is_default=True).cpu_on_gpu_nodes is None
    assert "cpu_on_gpu_nodes" not in dump(export_lab())
    apply_lab(_lab())
    apply_lab(_lab(switch="    cpu_on_gpu_nodes: null\n"))
    assert Cluster.objects.get(is_default=True).cpu_on_gpu_nodes is None


@pytest.mark.parametrize(("switch", "path", "message"), [
    ("    cpu_on_gpu_nodes: a100-80gb\n", "cpu_on_gpu_nodes", "No CPU pool"),
    ("    cpu_on_gpu_nodes: nowhere\n", "cpu_on_gpu_nodes", "No CPU pool"),
    ("    cpu_on_gpu_nodes: cpu\n    gpu_reserve_cores: -1\n", "gpu_reserve_cores", ""),
    ("    cpu_on_gpu_nodes: cpu\n    gpu_reserve_memory_gib: many\n", "gpu_reserve_memory_gib", ""),
])
def test_bad_switches_are_refused_at_their_path(switch, path, message):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_lab(switch=switch))
    found = [str(e) for e in exc.value.errors]
    assert any(path in f and message in f for f in found), found
