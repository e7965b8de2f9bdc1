"""CPU pools in the lab file: a flavor of kind cpu, its node groups sized in cores and GiB, department quotas
in cores and GiB and prices per core-hour and GiB-hour; applied, diffed and exported like their GPU
neighbours."""

from __future__ import annotations

import pytest

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from quotas.models import Flavor, Price, Quota
from scheduling.models import Node

pytestmark = pytest.mark.django_db

POOL = """
  - name: cpu
    kind: cpu
    resource_name: cpu
    node_labels: {pool: cpu}
"""
GROUP = """      - {name: sim-cpu, flavor: cpu, nodes: 2, cores: 32, memory_gib: 128}
"""
QUOTA = """      cpu: {cores: {nominal: 24, borrowing_limit: 16}, memory_gib: {nominal: 96, borrowing_limit: 64}}
"""
PRICE = """  cpu:
    realtime: {per_core_hour: 60, per_gib_hour: 8}
    elastic: {per_core_hour: 20, per_gib_hour: 3}
"""


def _lab(*, quota: str = QUOTA, price: str = PRICE, group: str = GROUP, pool: str = POOL) -> str:
    text = demo.LAB_FILE.read_text()
    text = text.replace("\nclusters:", pool + "\nclusters:", 1)
    text = text.replace("        gpus_per_node: 4\n", "        gpus_per_node: 4\n" + group, 1)
    text = text.replace("      a100-80gb: {nominal: 4, borrowing_limit: 4, lending_limit: null}\n",
                        "      a100-80gb: {nominal: 4, borrowing_limit: 4, lending_limit: null}\n" + quota, 1)
    return text.replace("  a100-80gb: {realtime: 3000, elastic: 1000, backfill: 400}\n",
                        "  a100-80gb: {realtime: 3000, elastic: 1000, backfill: 400}\n" + price, 1)


def test_a_cpu_pool_its_quotas_and_prices_are_applied_then_nothing_changes():
    r = apply_lab(_lab())
    assert "+ quota vision/cpu cores (nominal: 24; borrowing_limit: 16; lending_limit: None)" in "\n".join(
        r.lines) or any(line.startswith("+ quota vision/cpu cores") for line in r.lines)
    assert Flavor.objects.get(name="cpu").is_cpu
    assert sorted(Node.objects.filter(flavor__name="cpu").values_list("name", "gpus", "cpu_millicores",
                                                                       "memory_mib")) == [
        ("sim-cpu-0", 0, 32_000, 131_072), ("sim-cpu-1", 0, 32_000, 131_072)]
    rows = {q.resource: (q.nominal, q.borrowing_limit) for q in Quota.objects.filter(department__slug="vision",
                                                                                   flavor__name="cpu")}
    assert rows == {"cpu": (24, 16), "memory": (96, 64)}
    assert Price.objects.get(flavor__name="cpu", tier="elastic").per_core_hour == 20
    assert Price.objects.get(flavor__name="cpu", tier="realtime").per_gib_hour == 8
    assert apply_lab(_lab()).unchanged


def test_a_changed_cpu_quota_price_and_pool_show_in_the_diff():
    apply_lab(_lab())
    r = apply_lab(_lab(quota=QUOTA.replace("nominal: 24", "nominal: 20"),
                       price=PRICE.replace("per_core_hour: 20", "per_core_hour: 25"),
                       group=GROUP.replace("cores: 32", "cores: 48")), dry_run=True)
    text = "\n".join(r.lines)
    assert "~ quota vision/cpu cores: nominal: 24 -> 20" in text
    assert "~ price cpu/elastic: per_core_hour: 20 -> 25" in text
    assert "~ node group default/sim-cpu: cpu_millicores: 32000 -> 48000" in text
    assert r.changed == 3 and Quota.objects.get(department__slug="vision", resource="cpu").nominal == 24


def test_export_writes_the_pool_as_the_file_declares_it_and_round_trips(django_db_blocker):
    apply_lab(_lab())
    data = export_lab()
    assert {"name": "cpu", "kind": "cpu", "resource_name": "cpu", "node_labels": {"pool": "cpu"},
            "gpu_memory_gib": 0} in data["flavors"]
    groups = data["clusters"][0]["node_groups"]
    assert {"name": "sim-cpu", "flavor": "cpu", "nodes": 2, "cores": 32, "memory_gib": 128,
            "labels": {"pool": "cpu"}} in groups
    vision = next(d for d in data["departments"] if d["slug"] == "vision")
    assert vision["quotas"]["cpu"] == {"cores": {"nominal": 24, "borrowing_limit": 16, "lending_limit": None},
                                       "memory_gib": {"nominal": 96, "borrowing_limit": 64, "lending_limit": None}}
    assert data["prices"]["cpu"]["elastic"] == {"per_core_hour": 20, "per_gib_hour": 3}
    assert apply_lab(dump(data)).unchanged
    assert apply_lab(dump(data), prune=True).unchanged  # nothing of the pool is pruned as undeclared


def test_prune_removes_a_cpu_quota_the_file_leaves_out():
    apply_lab(_lab())
    r = apply_lab(_lab(quota=QUOTA.replace(", memory_gib: {nominal: 96, borrowing_limit: 64}", "")), prune=True)
    assert "- quota vision/cpu memory_gib" in r.lines
    assert not Quota.objects.filter(department__slug="vision", resource="memory").exists()


@pytest.mark.parametrize("change, path, message", [
    ({"quota": "      cpu: {nominal: 24}\n"}, "departments.0.quotas.cpu", "is a CPU pool"),
    ({"quota": "      a100-80gb@default: {cores: {nominal: 2}}\n"}, "departments.0.quotas.a100-80gb@default",
     "is a GPU flavor"),
    ({"quota": "      cpu: {cores: {nominal: 24}, disk: {nominal: 1}}\n"}, "departments.0.quotas.cpu.disk",
     "unknown field"),
    ({"quota": "      cpu: {cores: {nominal: -1}}\n"}, "departments.0.quotas.cpu.cores.nominal", ""),
    ({"price": "  cpu: {elastic: 20}\n"}, "prices.cpu", "is a CPU pool"),
    ({"price": "  cpu: {elastic: {per_core_hour: 20}}\n"}, "prices.cpu.elastic", "per_gib_hour is required"),
    ({"price": "  cpu: {elastic: {per_core_hour: -2, per_gib_hour: 1}}\n"}, "prices.cpu.elastic.per_core_hour",
     "whole number"),
    ({"price": "  cpu: {cheap: {per_core_hour: 2, per_gib_hour: 1}}\n"}, "prices.cpu.cheap", "must be one of"),
    ({"group": "      - {name: sim-cpu, flavor: cpu, nodes: 2, cores: 32}\n"}, "clusters.0.node_groups.1",
     "gpus_per_node is required"),
    ({"group": "      - {name: sim-cpu, flavor: cpu, nodes: 2, cores: 0, memory_gib: 8}\n"},
     "clusters.0.node_groups.1.cores", "whole number"),
    ({"group": "      - {name: sim-cpu, flavor: cpu, nodes: 2, gpus_per_node: 1, cores: 8, memory_gib: 8}\n"},
     "clusters.0.node_groups.1", "0 GPUs"),
    ({"group": "      - {name: sim-gpu, flavor: a100-80gb, nodes: 2, gpus_per_node: 4, cores: 64}\n"},
     "clusters.0.node_groups.1", "both cores and memory_gib"),
    ({"group": "      - {name: sim-cpu, flavor: cpu, nodes: 2, gpus_per_node: 4}\n"},
     "clusters.0.node_groups.1", ""),
    ({"pool": POOL.replace("kind: cpu", "kind: tpu")}, "flavors.1.kind", "must be one of gpu, cpu"),
])
def test_bad_cpu_pool_entries_are_refused_at_their_path(change, path, message):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_lab(**change))
    found = [str(e) for e in exc.value.errors]
    assert any(path in f and message in f for f in found), found
    assert not Flavor.objects.filter(name="cpu").exists()


def test_a_flavor_keeps_its_kind():
    apply_lab(_lab())
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_lab(pool=POOL.replace("kind: cpu", "kind: gpu"), quota="", price="", group=""))
    assert any("kind does not change" in str(e) for e in exc.value.errors)


def test_prune_removes_a_cpu_pool_group_the_file_leaves_out():
    apply_lab(_lab())
    r = apply_lab(_lab(group="", quota="", price=""), prune=True)
    assert "- node group default/sim-cpu" in r.lines
    assert not Node.objects.filter(flavor__name="cpu").exists()
