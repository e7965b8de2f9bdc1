"""A CPU pool's quotas (cores, GiB) and prices (per core-hour, per GiB-hour) through the REST API, where the GPU
quotas and prices are (docs/workloads.md, "Shapes"): platform admins set them, a department's members see their
department's, one 400 per bad field."""

from __future__ import annotations

import pytest

from quotas.models import Flavor, FlavorKind, Price, Quota, QuotaResource
from scheduling.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(lab):
    lab.cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    Node.objects.create(cluster=lab.cluster, name="c0", flavor=lab.cpu, gpus=0, cpu_millicores=32000,
                        memory_mib=131072, labels={"pool": "cpu"})
    return lab


def test_a_platform_admin_sets_a_pools_core_and_memory_quotas(pool, client_for):
    root = client_for(pool.root)
    for resource, nominal in (("cpu", 16), ("memory", 64)):
        r = root.post("/api/v1/quotas", {"department": "vision", "flavor": "cpu", "resource": resource,
                                         "nominal": nominal, "borrowing_limit": 8}, format="json")
        assert r.status_code == 201, r.json()
        assert (r.json()["resource"], r.json()["nominal"], r.json()["in_use"]) == (resource, nominal, 0)
    assert set(Quota.objects.filter(flavor=pool.cpu).values_list("resource", "nominal")) == {("cpu", 16),
                                                                                             ("memory", 64)}
    q = Quota.objects.get(flavor=pool.cpu, resource="cpu")
    r = root.patch(f"/api/v1/quotas/{q.pk}", {"nominal": 20, "lending_limit": 4}, format="json")
    assert r.status_code == 200 and (r.json()["nominal"], r.json()["lending_limit"]) == (20, 4)


def test_cores_and_gib_in_use_count_running_cpu_work(pool, client_for, submit, go):
    from scheduling.services.cycle import run_cycle

    Quota.objects.create(department=pool.vision, flavor=pool.cpu, resource=QuotaResource.CPU, nominal=16)
    Quota.objects.create(department=pool.vision, flavor=pool.cpu, resource=QuotaResource.MEMORY, nominal=64)
    submit(pool.alice, flavor="cpu", gpus=0, pods=3, cpu="1500m", memory="3Gi")
    go(run_cycle)
    rows = {q["resource"]: q for q in client_for(pool.alice).get("/api/v1/quotas").json()["results"]
            if q["flavor"] == "cpu"}
    assert (rows["cpu"]["in_use"], rows["memory"]["in_use"]) == (5, 9)  # 4.5 cores rounded up, 9 GiB


def test_a_department_sees_its_own_pool_quotas_only(pool, client_for):
    Quota.objects.create(department=pool.vision, flavor=pool.cpu, resource=QuotaResource.CPU, nominal=16)
    Quota.objects.create(department=pool.nlp, flavor=pool.cpu, resource=QuotaResource.CPU, nominal=8)
    seen = [(q["department"], q["resource"]) for q in client_for(pool.bob).get("/api/v1/quotas").json()["results"]
            if q["flavor"] == "cpu"]
    assert seen == [("nlp", "cpu")]
    other = Quota.objects.get(department=pool.vision, flavor=pool.cpu)
    assert client_for(pool.bob).get(f"/api/v1/quotas/{other.pk}").status_code == 404


@pytest.mark.parametrize("body, field", [
    ({"flavor": "cpu", "resource": "gpus"}, "resource"),           # a CPU pool counts cores or GiB
    ({"flavor": "a100-80gb", "resource": "cpu"}, "resource"),      # a GPU flavor counts GPUs
    ({"flavor": "cpu", "resource": "disk"}, "resource"),
    ({"flavor": "cpu", "resource": "cpu", "nominal": -1}, "nominal"),
    ({"flavor": "cpu", "resource": "cpu", "lending_limit": 99}, "lending_limit"),
])
def test_a_bad_pool_quota_is_a_400_on_its_field(pool, client_for, body, field):
    Quota.objects.filter(department=pool.vision, flavor=pool.a100).delete()
    r = client_for(pool.root).post("/api/v1/quotas", {"department": "vision", "nominal": 8, **body}, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.json()
    assert not Quota.objects.filter(department=pool.vision, resource__in=("cpu", "memory")).exists()


def test_a_department_admin_cannot_set_a_pool_quota(pool, client_for):
    r = client_for(pool.vadmin).post("/api/v1/quotas", {"department": "vision", "flavor": "cpu", "resource": "cpu",
                                                        "nominal": 8}, format="json")
    assert r.status_code == 403 and not Quota.objects.filter(flavor=pool.cpu).exists()


def test_a_pools_prices_per_core_hour_and_gib_hour(pool, client_for):
    root = client_for(pool.root)
    r = root.post("/api/v1/prices", {"flavor": "cpu", "tier": "elastic", "per_core_hour": 200, "per_gib_hour": 10},
                  format="json")
    assert r.status_code == 201, r.json()
    assert (r.json()["per_gpu_hour"], r.json()["per_core_hour"], r.json()["per_gib_hour"]) == (0, 200, 10)
    r = root.patch(f"/api/v1/prices/{r.json()['id']}", {"per_core_hour": 250}, format="json")
    assert r.status_code == 200 and (r.json()["per_core_hour"], r.json()["per_gib_hour"]) == (250, 10)
    listed = {(p["flavor"], p["tier"]): p for p in client_for(pool.alice).get("/api/v1/prices").json()["results"]}
    assert listed[("cpu", "elastic")]["per_core_hour"] == 250  # every member reads prices


@pytest.mark.parametrize("body, field", [
    ({"flavor": "cpu", "per_gpu_hour": 100}, "per_gpu_hour"),                     # a pool has no GPU-hours
    ({"flavor": "cpu"}, "per_core_hour"),                                         # nothing to price
    ({"flavor": "cpu", "per_core_hour": -1}, "per_core_hour"),
    ({"flavor": "cpu", "per_core_hour": 1, "per_gib_hour": "ten"}, "per_gib_hour"),
    ({"flavor": "a100-80gb", "per_gpu_hour": 100, "per_core_hour": 5}, "per_core_hour"),  # a GPU flavor's is per GPU
    ({"flavor": "a100-80gb", "per_gib_hour": 5}, "per_gib_hour"),
])
def test_a_bad_price_is_a_400_on_its_field(pool, client_for, body, field):
    r = client_for(pool.root).post("/api/v1/prices", {"tier": "elastic", **body}, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.json()
    assert not Price.objects.exists()


def test_a_researcher_cannot_set_a_pools_price(pool, client_for):
    r = client_for(pool.alice).post("/api/v1/prices", {"flavor": "cpu", "tier": "elastic", "per_core_hour": 1},
                                    format="json")
    assert r.status_code == 403 and not Price.objects.exists()


def test_a_department_admin_requests_more_cores_and_a_platform_admin_approves(pool, client_for):
    Quota.objects.create(department=pool.vision, flavor=pool.cpu, resource=QuotaResource.CPU, nominal=16,
                         borrowing_limit=8)
    Quota.objects.create(department=pool.vision, flavor=pool.cpu, resource=QuotaResource.MEMORY, nominal=64)
    r = client_for(pool.vadmin).post("/api/v1/quota-requests", {
        "department": "vision", "flavor": "cpu", "resource": "cpu", "nominal": 24, "reason": "tokenising"},
        format="json")
    assert r.status_code == 201, r.json()
    assert (r.json()["resource"], r.json()["nominal"], r.json()["borrowing_limit"]) == ("cpu", 24, 8)  # kept
    assert client_for(pool.root).post(f"/api/v1/quota-requests/{r.json()['id']}/approve", {},
                                      format="json").status_code == 200
    assert dict(Quota.objects.filter(flavor=pool.cpu).values_list("resource", "nominal")) == {"cpu": 24,
                                                                                              "memory": 64}


@pytest.mark.parametrize("body, field", [
    ({"resource": "gpus", "nominal": 8}, "resource"),
    ({"resource": "memory"}, "nominal"),           # no memory quota in force to keep: give each number
    ({"resource": "cpu", "nominal": 8, "borrowing_limit": 0, "lending_limit": 9}, "lending_limit"),
])
def test_a_bad_pool_quota_request_is_a_400_on_its_field(pool, client_for, body, field):
    r = client_for(pool.vadmin).post("/api/v1/quota-requests", {"department": "vision", "flavor": "cpu",
                                                                "reason": "why", **body}, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.json()
