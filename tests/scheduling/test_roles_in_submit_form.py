"""The submit form takes a job of several roles (a row per role), and a job's page re-submits it with CPU data
workers beside its trainers in one click: the form prefilled from the job's spec with the data workers added
(docs/workloads.md, "Add data workers"). Bad rows come back with their errors under the row's inputs."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.test import Client

from quotas.models import Flavor, FlavorKind, Quota, QuotaResource
from scheduling.models import Job, Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(lab):
    """A CPU pool of two 16-core, 64 GiB nodes; vision may use 24 cores."""
    lab.cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu",
                                    node_labels={"pool": "cpu"})
    for i in range(2):
        Node.objects.create(cluster=lab.cluster, name=f"c{i}", flavor=lab.cpu, gpus=0, cpu_millicores=16000,
                            memory_mib=65536, labels={"pool": "cpu"})
    Quota.objects.create(department=lab.vision, flavor=lab.cpu, resource=QuotaResource.CPU, nominal=16,
                         borrowing_limit=8)
    return lab


def _client(user):
    c = Client()
    c.force_login(user)
    return c


class _Form(HTMLParser):
    """What a browser would post from the page's submit form: its enabled inputs, textareas and selects."""

    def __init__(self):
        super().__init__()
        self.data: dict[str, str] = {}
        self.disabled: set[str] = set()
        self._in_form = False
        self._textarea = self._select = None
        self._first_option: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and "data-quote-url" in a:
            self._in_form = True
        if not self._in_form:
            return
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("checkbox", "submit"):
            if "disabled" in a:
                self.disabled.add(name)
            else:
                self.data[name] = a.get("value") or ""
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = ""
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select:
            self._first_option.setdefault(self._select, a.get("value", ""))
            if "selected" in a:
                self.data[self._select] = a.get("value", "")

    def handle_endtag(self, tag):
        if tag == "form":
            self._in_form = False
        elif tag == "textarea":
            self._textarea = None
        elif tag == "select" and self._select:
            self.data.setdefault(self._select, self._first_option.get(self._select, ""))
            self._select = None

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea] += data


def _form(html: str) -> dict[str, str]:
    f = _Form()
    f.feed(html)
    return f.data


def _errors_for(html: str, name: str) -> bool:
    return f'data-error-for="{name}"' in html


def test_the_job_page_offers_data_workers_for_a_gpu_job_only(pool, submit):
    gpu = submit(pool.alice, name="train", gpus=2)
    cpu = submit(pool.alice, name="tokenise", flavor="cpu", gpus=0, cpu="2", memory="4Gi")
    c = _client(pool.alice)
    assert b'id="add-data-workers"' in c.get(f"/jobs/{gpu.pk}/").content
    assert b'id="add-data-workers"' not in c.get(f"/jobs/{cpu.pk}/").content  # no GPUs to feed


def test_add_data_workers_prefills_the_roles_and_submits_the_job_of_two_roles(pool, submit):
    job = submit(pool.alice, name="train", gpus=2, pods=2, cpu="8", memory="32Gi")
    c = _client(pool.amy)
    r = c.get(f"/jobs/new?clone={job.pk}&add_data_workers=3")
    html = r.content.decode()
    assert r.status_code == 200
    assert f"Prefilled from job {job.pk} (train) with 3 more data workers" in html
    form = _form(html)
    trainer = {f: form[f"role-0-{f}"] for f in ("name", "pods", "gpus", "cpu", "memory", "failure_policy")}
    data = {f: form[f"role-1-{f}"] for f in ("name", "pods", "gpus", "cpu", "memory", "failure_policy")}
    assert trainer == {"name": "trainer", "pods": "2", "gpus": "2", "cpu": "8000m", "memory": "32768Mi",
                       "failure_policy": "restart-attempt"}
    assert data == {"name": "data", "pods": "3", "gpus": "0", "cpu": "4", "memory": "8Gi",
                    "failure_policy": "restart-pod"}
    assert form["role-2-name"] == ""  # a row to add a role in
    # the job's own size starts blank: a job of roles has its size in its roles
    assert [form.get(f) for f in ("gpus", "pods", "cpu", "memory")] == ["", "", "", ""]

    r = c.post("/jobs/new", form)
    assert r.status_code == 302, r.content.decode()[-3000:]
    clone = Job.objects.exclude(pk=job.pk).get()
    assert (clone.owner, clone.total_gpus, clone.cpu_pods) == (pool.amy, 4, 3)
    assert list(clone.roles.order_by("index").values_list("name", "pods", "gpus_per_pod", "cpu_millicores",
                                                           "failure_policy", "flavor__name")) == [
        ("trainer", 2, 2, 8000, "restart-attempt", None), ("data", 3, 0, 4000, "restart-pod", "cpu")]


def test_a_job_of_roles_is_grown_and_its_roles_come_back_in_the_form(pool, client_for):
    r = client_for(pool.alice).post("/api/v1/jobs", {
        "name": "two", "image": "busybox", "command": ["python", "train.py"], "flavor": "a100-80gb", "roles": [
            {"name": "trainer", "pods": 1, "gpus": 2, "cpu": "8", "memory": "32Gi"},
            {"name": "data", "pods": 2, "cpu": "2", "memory": "4Gi", "failure_policy": "restart-pod",
             "command": ["python", "loader.py"]}]}, format="json")
    assert r.status_code == 201, r.json()
    job = Job.objects.get(pk=r.json()["id"])
    form = _form(_client(pool.alice).get(f"/jobs/new?clone={job.pk}&add_data_workers=2").content.decode())
    assert (form["role-1-name"], form["role-1-pods"], form["role-1-command"]) == (
        "data", "4", '["python", "loader.py"]')
    assert _client(pool.alice).post("/jobs/new", form).status_code == 302
    grown = Job.objects.exclude(pk=job.pk).get()
    assert grown.roles.get(name="data").command == ["python", "loader.py"]


def test_the_form_takes_two_roles_typed_in_from_scratch(pool):
    form = {"name": "hand", "image": "busybox", "command": "python train.py", "flavor": "a100-80gb",
            "role-0-name": "trainer", "role-0-pods": "1", "role-0-gpus": "2", "role-0-failure_policy": "restart-attempt",
            "role-1-name": "data", "role-1-pods": "2", "role-1-cpu": "2", "role-1-memory": "4Gi",
            "role-1-command": "python loader.py", "role-1-failure_policy": "restart-pod",
            "role-2-failure_policy": "restart-attempt"}  # an empty row's selects still post
    r = _client(pool.alice).post("/jobs/new", form)
    assert r.status_code == 302, r.content.decode()[-3000:]
    job = Job.objects.get()
    assert [(x.name, x.pods, x.gpus_per_pod, x.command) for x in job.roles.order_by("index")] == [
        ("trainer", 1, 2, None), ("data", 2, 0, ["/bin/sh", "-c", "python loader.py"])]


BASE = {"name": "bad", "image": "busybox", "command": "python train.py", "flavor": "a100-80gb",
        "role-0-name": "trainer", "role-0-pods": "1", "role-0-gpus": "2",
        "role-1-name": "data", "role-1-pods": "2", "role-1-cpu": "2", "role-1-memory": "4Gi"}


@pytest.mark.parametrize("change, error_for", [
    ({"role-1-pods": "0"}, "role-1-pods"),                    # a role without pods
    ({"role-1-name": "trainer"}, "roles"),                    # two roles of one name
    ({"role-1-name": "Data Workers"}, "role-1-name"),
    ({"role-1-cpu": "64"}, "role-1-cpu"),                     # larger than every node of the pool
    ({"role-1-cpu": "lots"}, "role-1-cpu"),
    ({"role-1-command": "[broken"}, "role-1-command"),
    ({"role-1-image": "Not An Image"}, "role-1-image"),
    ({"role-1-failure_policy": "sometimes"}, "role-1-failure_policy"),
    ({"role-1-flavor": "a100-80gb"}, "role-1-flavor"),        # a GPU flavor is no CPU pool
    ({"gpus": "1"}, "gpus"),                                  # the job's own size beside its roles
    ({"role-1-gpus": "1"}, "roles"),                          # GPU roles of different sizes
])
def test_a_bad_role_row_comes_back_with_its_error_under_it(pool, change, error_for):
    r = _client(pool.alice).post("/jobs/new", {**BASE, **change})
    html = r.content.decode()
    assert r.status_code == 400
    assert _errors_for(html, error_for), html[html.find('class="field-error"') - 200:][:1500]
    assert _form(html)["role-1-name"] == {**BASE, **change}["role-1-name"]  # kept as typed
    assert Job.objects.count() == 0


def test_cpu_over_the_departments_ceiling_is_said_on_the_form(pool):
    r = _client(pool.alice).post("/jobs/new", {**BASE, "role-1-pods": "7", "role-1-cpu": "4"})  # 28 cores > 24
    assert r.status_code == 400 and Job.objects.count() == 0
    assert _errors_for(r.content.decode(), "roles") and "cores" in r.content.decode()


@pytest.mark.parametrize("count", ["0", "65", "four"])
def test_a_bad_number_of_data_workers_is_a_400_on_the_empty_form(pool, submit, count):
    job = submit(pool.alice, gpus=2)
    r = _client(pool.alice).get(f"/jobs/new?clone={job.pk}&add_data_workers={count}")
    assert r.status_code == 400 and _errors_for(r.content.decode(), "add_data_workers")
    assert "Prefilled" not in r.content.decode()


def test_data_workers_for_a_cpu_only_job_are_refused(pool, submit):
    job = submit(pool.alice, flavor="cpu", gpus=0, cpu="2", memory="4Gi")
    r = _client(pool.alice).get(f"/jobs/new?clone={job.pk}&add_data_workers=2")
    assert r.status_code == 400 and _errors_for(r.content.decode(), "add_data_workers")
    assert "no GPUs to feed" in r.content.decode()


def test_another_departments_job_is_a_404_with_data_workers_too(pool, submit):
    foreign = submit(pool.bob, gpus=2)
    assert _client(pool.alice).get(f"/jobs/new?clone={foreign.pk}&add_data_workers=2").status_code == 404


def test_the_live_quote_marks_a_bad_role_row(pool):
    r = _client(pool.alice).post("/jobs/new/quote", {**BASE, "role-1-pods": "0"})
    assert r.status_code == 400 and 'data-quote-error="role-1-pods"' in r.content.decode()


def test_the_live_quote_quotes_a_job_of_roles(pool):
    r = _client(pool.alice).post("/jobs/new/quote", BASE)
    assert r.status_code == 200, r.content.decode()[-2000:]
    assert 'data-quote="cost"' in r.content.decode()


def test_the_quote_api_adds_the_data_workers_cpu_to_the_trainers_gpus(pool, client_for):
    from quotas.services.pricing import price_set

    price_set(flavor=pool.cpu, tier="elastic", per_gpu_hour=0, per_core_hour=100, per_gib_hour=0, actor=pool.root)
    body = {"name": "q", "image": "busybox", "command": ["python", "train.py"], "flavor": "a100-80gb",
            "max_runtime_s": 3600}
    trainers = {"name": "trainer", "pods": 1, "gpus": 2}
    alone = client_for(pool.alice).post("/api/v1/jobs/quote", {**body, "roles": [trainers]}, format="json")
    fed = client_for(pool.alice).post("/api/v1/jobs/quote", {**body, "roles": [
        trainers, {"name": "data", "pods": 2, "cpu": "4", "memory": "8Gi"}]}, format="json")
    assert (alone.status_code, fed.status_code) == (200, 200), fed.content
    assert fed.json()["estimated_cost"] - alone.json()["estimated_cost"] == 8 * 100  # 8 cores for an hour
