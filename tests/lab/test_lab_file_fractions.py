"""Shared GPUs in the lab file (docs/fractions.md): a HAMi flavor and a replica flavor are applied and exported as
they are declared, an incomplete declaration is an error on its line, and the demo seeds a shared flavor."""

from __future__ import annotations

import pytest

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from quotas.models import Flavor

pytestmark = pytest.mark.django_db

SHARED = """
  - name: a100-shared
    resource_name: nvidia.com/gpu
    node_labels: {gpu-type: a100-shared}
    gpu_memory_gib: 80
    sharing: hami
"""
T4 = """
  - name: t4-shared
    resource_name: nvidia.com/gpu
    node_labels: {gpu-type: t4}
    gpu_memory_gib: 16
    sharing: replicas
    shared_resource_name: nvidia.com/gpu.shared
    replicas_per_gpu: 4
"""


def _lab(extra: str = "") -> str:
    return demo.LAB_FILE.read_text().replace("\nclusters:", extra + "\nclusters:", 1)


def test_shared_flavors_are_applied_once_and_exported():
    apply_lab(_lab(SHARED + T4))
    shared = Flavor.objects.get(name="a100-shared")
    assert (shared.sharing, shared.share_capacity) == ("hami", 80 * 1024)
    t4 = Flavor.objects.get(name="t4-shared")
    assert (t4.sharing, t4.shared_resource_name, t4.replicas_per_gpu) == ("replicas", "nvidia.com/gpu.shared", 4)
    assert not Flavor.objects.get(name="a100-80gb").sharing
    assert apply_lab(_lab(SHARED + T4)).unchanged
    exported = dump(export_lab())
    assert "sharing: hami" in exported and "replicas_per_gpu: 4" in exported


@pytest.mark.parametrize(("declared", "field"), [
    (T4.replace("    replicas_per_gpu: 4\n", ""), "replicas_per_gpu"),
    (T4.replace("    shared_resource_name: nvidia.com/gpu.shared\n", ""), "shared_resource_name"),
    (T4.replace("sharing: replicas", "sharing: hami").replace("gpu_memory_gib: 16", "gpu_memory_gib: 0")
     .replace("    shared_resource_name: nvidia.com/gpu.shared\n    replicas_per_gpu: 4\n", ""), "gpu_memory_gib"),
    (T4.replace("sharing: replicas", "sharing: sometimes"), "sharing"),
])
def test_an_incomplete_sharing_declaration_is_an_error(declared, field):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_lab(declared))
    assert any(field in str(e.path) for e in exc.value.errors), [(e.path, e.message) for e in exc.value.errors]
    assert not Flavor.objects.filter(name="t4-shared").exists()


def test_the_demo_has_a_flavor_whose_gpus_notebooks_share(settings, tmp_path):
    settings.DATA_DIR = str(tmp_path)
    demo.seed(jobs=False)
    shared = Flavor.objects.get(name="a100-shared")
    assert shared.sharing == "hami" and shared.nodes.get().gpus == 2
    assert shared.quotas.filter(department__slug="vision").get().nominal == 1
