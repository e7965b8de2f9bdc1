"""A CPU pool's quotas (cores, GiB) and prices (per core-hour, GiB-hour) on the pages where the GPU ones are: the
department's quota form (platform admins set, department admins request), the department page, the prices
page; each bad field said under it."""

from __future__ import annotations

import pytest
from django.test import Client

from quotas.models import Flavor, FlavorKind, Price, Quota, QuotaChangeRequest, QuotaResource
from scheduling.models import Node

pytestmark = pytest.mark.django_db

UNLIMITED = {"borrowing_unlimited": "on", "lending_all": "on", "reason": "tokenising"}


@pytest.fixture
def pool(lab):
    lab.cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    Node.objects.create(cluster=lab.cluster, name="c0", flavor=lab.cpu, gpus=0, cpu_millicores=32000,
                        memory_mib=131072, labels={"pool": "cpu"})
    return lab


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_a_platform_admin_sets_a_pools_cores_and_memory_on_the_quota_form(pool):
    c = _client(pool.root)
    page = c.get("/lab/departments/vision/quota").content.decode()
    assert '<option value="cpu/cpu"' in page and '<option value="cpu/memory"' in page
    assert c.post("/lab/departments/vision/quota", {"flavor": "cpu/cpu", "nominal": "16",
                                                    **UNLIMITED}).status_code == 302
    assert c.post("/lab/departments/vision/quota", {"flavor": "cpu/memory", "nominal": "64", "borrowing_limit": "32",
                                                    "lending_all": "on", "reason": "r"}).status_code == 302
    assert set(Quota.objects.filter(flavor=pool.cpu).values_list("resource", "nominal", "borrowing_limit")) == {
        ("cpu", 16, None), ("memory", 64, 32)}
    # each of the two is its own quota: changing the cores keeps the memory
    assert c.post("/lab/departments/vision/quota", {"flavor": "cpu/cpu", "nominal": "20",
                                                    **UNLIMITED}).status_code == 302
    assert dict(Quota.objects.filter(flavor=pool.cpu).values_list("resource", "nominal")) == {"cpu": 20, "memory": 64}
    assert Quota.objects.get(department=pool.vision, flavor=pool.a100).nominal == 4  # the GPUs' untouched
    page = c.get("/lab/departments/vision/quota?flavor=cpu/memory").content.decode()
    assert 'name="nominal" value="64"' in page  # the form opens with the quota in force
    dept = c.get("/lab/departments/vision/").content.decode()
    assert 'data-quota="cpu/cpu"' in dept and "cpu: memory (GiB)" in dept


def test_a_department_admin_requests_cores_on_the_quota_form(pool):
    r = _client(pool.vadmin).post("/lab/departments/vision/quota", {"flavor": "cpu/cpu", "nominal": "8",
                                                                    **UNLIMITED})
    assert r.status_code == 302
    req = QuotaChangeRequest.objects.get()
    assert (req.flavor, req.resource, req.nominal) == (pool.cpu, "cpu", 8)
    assert not Quota.objects.filter(flavor=pool.cpu).exists()  # asked, not set


@pytest.mark.parametrize("change, field", [
    ({"cluster": "default"}, "cluster"),        # a CPU pool's quotas are global
    ({"nominal": "-3"}, "nominal"),
    ({"flavor": "cpu/disk"}, "flavor"),
    ({"lending_all": "", "lending_limit": "99"}, "lending_limit"),
])
def test_a_bad_pool_quota_on_the_form_says_why(pool, change, field):
    body = {"flavor": "cpu/cpu", "nominal": "8", **UNLIMITED, **change}
    body = {k: v for k, v in body.items() if v != ""}
    r = _client(pool.root).post("/lab/departments/vision/quota", body)
    assert r.status_code == 400 and field in r.context["errors"], r.context["errors"]
    assert not Quota.objects.filter(flavor=pool.cpu).exists()


def test_a_platform_admin_prices_a_pool_on_the_prices_page(pool):
    c = _client(pool.root)
    r = c.post("/budgets/prices/", {"flavor": "cpu", "tier": "elastic", "per_core_hour": "0.2",
                                    "per_gib_hour": "0.01"})
    assert r.status_code == 302, r.context["errors"] if r.context else r
    assert Price.objects.filter(flavor=pool.cpu).values_list("per_gpu_hour", "per_core_hour",
                                                             "per_gib_hour").get() == (0, 200, 10)
    page = c.get("/budgets/prices/").content.decode()
    assert "cpu (CPU pool)" in page and 'data-col="per_core_hour">0.2' in page
    edit = c.get("/budgets/prices/?flavor=cpu&tier=elastic").content.decode()
    assert 'name="per_core_hour" value="0.2"' in edit  # the form opens with the price in force


@pytest.mark.parametrize("body, field", [
    ({"flavor": "cpu", "per_gpu_hour": "1"}, "per_gpu_hour"),
    ({"flavor": "cpu"}, "per_core_hour"),
    ({"flavor": "cpu", "per_core_hour": "-1"}, "per_core_hour"),
    ({"flavor": "cpu", "per_core_hour": "0.0001"}, "per_core_hour"),  # finer than a milli-credit
    ({"flavor": "a100-80gb", "per_gpu_hour": "1", "per_core_hour": "1"}, "per_core_hour"),
])
def test_a_bad_pool_price_on_the_page_says_why(pool, body, field):
    r = _client(pool.root).post("/budgets/prices/", {"tier": "elastic", **body})
    assert r.status_code == 400 and field in r.context["errors"], r.context["errors"]
    assert not Price.objects.exists()


def test_only_platform_admins_price_a_pool(pool):
    r = _client(pool.vadmin).post("/budgets/prices/", {"flavor": "cpu", "tier": "elastic", "per_core_hour": "1"})
    assert r.status_code == 403 and not Price.objects.exists()


def test_a_pools_quota_shows_no_whatif_link(pool):
    """The what-if replay proposes GPU quotas only: a pool's numbers offer no link to it."""
    Quota.objects.create(department=pool.vision, flavor=pool.cpu, resource=QuotaResource.CPU, nominal=8)
    page = _client(pool.root).get("/lab/departments/vision/quota?flavor=cpu/cpu").content.decode()
    assert 'id="whatif-link"' not in page
