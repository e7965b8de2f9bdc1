"""The cluster settings of CPU work on GPU nodes through the API: platform admins only, a 400 per bad field,
audited, shown back."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry
from quotas.models import Flavor, FlavorKind

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(lab):
    lab.cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    return lab


def patch(client_for, user, body):
    return client_for(user).patch("/api/v1/clusters/default", body, format="json")


def test_a_platform_admin_switches_it_on_and_off(pool, client_for):
    r = patch(client_for, pool.root, {"cpu_on_gpu_nodes": "cpu", "gpu_reserve_cores": 8, "gpu_reserve_memory_gib": 64})
    assert r.status_code == 200, r.json()
    assert (r.json()["cpu_on_gpu_nodes"], r.json()["gpu_reserve_cores"], r.json()["gpu_reserve_memory_gib"]) == (
        "cpu", 8, 64)
    entry = AuditEntry.objects.filter(action="cluster.update").latest("pk")
    assert entry.new["cpu_on_gpu_nodes"] == "cpu"
    r = patch(client_for, pool.root, {"cpu_on_gpu_nodes": None})
    assert r.status_code == 200 and r.json()["cpu_on_gpu_nodes"] is None
    assert client_for(pool.root).get("/api/v1/clusters/default").json()["gpu_reserve_cores"] == 8


@pytest.mark.parametrize(("body", "field"), [
    ({"cpu_on_gpu_nodes": "a100-80gb"}, "cpu_on_gpu_nodes"),
    ({"cpu_on_gpu_nodes": "nowhere"}, "cpu_on_gpu_nodes"),
    ({"gpu_reserve_cores": -1}, "gpu_reserve_cores"),
    ({"gpu_reserve_cores": 1000}, "gpu_reserve_cores"),
    ({"gpu_reserve_memory_gib": "lots"}, "gpu_reserve_memory_gib"),
])
def test_bad_settings_are_400_on_their_field(pool, client_for, body, field):
    r = patch(client_for, pool.root, body)
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.json()


def test_a_researcher_cannot_switch_it(pool, client_for):
    assert patch(client_for, pool.alice, {"cpu_on_gpu_nodes": "cpu"}).status_code == 403


def test_the_clusters_page_switches_it(pool):
    from django.test import Client

    c = Client()
    c.force_login(pool.root)
    r = c.post("/lab/clusters/", {"action": "cpu_on_gpu_nodes", "cluster": "default", "cpu_on_gpu_nodes": "cpu",
                                 "gpu_reserve_cores": "4", "gpu_reserve_memory_gib": "32"})
    assert r.status_code == 302
    pool.cluster.refresh_from_db()
    assert pool.cluster.cpu_on_gpu_nodes == pool.cpu
    r = c.post("/lab/clusters/", {"action": "cpu_on_gpu_nodes", "cluster": "default", "cpu_on_gpu_nodes": "",
                                 "gpu_reserve_cores": "-3", "gpu_reserve_memory_gib": "32"})
    assert r.status_code == 400 and "gpu_reserve_cores" in r.context["errors"]
    pool.cluster.refresh_from_db()
    assert pool.cluster.cpu_on_gpu_nodes == pool.cpu  # nothing half-written
