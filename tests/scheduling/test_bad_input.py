"""Every bad submission gets HTTP 400 with field-level errors, and nothing is written."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.models import AuditEntry
from scheduling.models import Job, JobEvent, SimPod

pytestmark = pytest.mark.django_db

PAST = (timezone.now() - timedelta(hours=1)).isoformat()

BAD = [
    # (overrides, field, code or None)
    ({"gpus": 0}, "gpus", "needs_cpu_pool"),  # 0 GPUs runs on a CPU pool, never on a GPU flavor
    ({"gpus": -1}, "gpus", "min_value"),
    ({"gpus": 1.5}, "gpus", "invalid"),
    ({"gpus": "2"}, "gpus", "invalid"),
    ({"gpus": True}, "gpus", "invalid"),
    ({"gpus": 5}, "gpus", "exceeds_largest_node"),  # nodes have 4 GPUs
    ({"pods": 0}, "pods", "min_value"),
    ({"pods": 3, "gpus": 4}, "pods", "exceeds_largest_pool"),  # 12 GPUs at once on a pool of 2 x 4
    ({"pods": 5, "gpus": 3}, "pods", "exceeds_largest_pool"),  # one 3-GPU pod per 4-GPU node: room for 2
    ({"flavor": "h100"}, "flavor", "does_not_exist"),
    ({"flavor": "a100-mig-3g.40gb"}, "flavor", "no_nodes"),  # a flavor no node offers
    ({"image": "Not An Image!"}, "image", "invalid_image"),
    ({"image": "repo/img:tag with space"}, "image", "invalid_image"),
    ({"image": ""}, "image", "blank"),
    ({"command": []}, "command", "empty"),
    ({"command": "python train.py"}, "command", "not_a_list"),
    ({"command": [""]}, "command", "blank"),
    ({"command": ["x" * 9000]}, "command", None),
    ({"command": ["a" * 8000] * 5}, "command", "too_long"),
    ({"env": {"KUBERNETES_SERVICE_HOST": "x"}}, "env", "invalid_env"),
    ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env", "invalid_env"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env", "invalid_env"),
    ({"env": {"1BAD": "x"}}, "env", "invalid_env"),
    ({"env": {"A-B": "x"}}, "env", "invalid_env"),
    ({"env": ["A=1"]}, "env", "not_a_dict"),
    ({"env": {"A" * 129: "x"}}, "env", "invalid_env"),
    ({"env": {"A\n": "x"}}, "env", "invalid_env"),
    ({"env": {"SIM_DURATION_S": "nan"}}, "env", "invalid_env"),
    ({"env": {"SIM_DURATION_S": "inf"}}, "env", "invalid_env"),
    ({"env": {"SIM_DURATION_S": "1e400"}}, "env", "invalid_env"),
    ({"env": {"SIM_DURATION_S": "-5"}}, "env", "invalid_env"),
    ({"env": {"SIM_EXIT_CODE": "1.5"}}, "env", "invalid_env"),
    ({"env": {"SIM_EXIT_CODE": "999"}}, "env", "invalid_env"),
    ({"image": "UPPER/case"}, "image", "invalid_image"),
    ({"image": "pytorch/py\ntorch"}, "image", "invalid_image"),
    ({"image": "repo/img:t\u00e9g"}, "image", "invalid_image"),
    ({"image": "Repo/img"}, "image", "invalid_image"),
    ({"image": "a" * 256}, "image", "invalid_image"),
    ({"deadline": PAST}, "deadline", "past"),
    ({"deadline": "tomorrow"}, "deadline", "invalid"),
    ({"tier": "gold"}, "tier", "invalid_choice"),
    ({"urgency": "asap"}, "urgency", "invalid_choice"),
    ({"task_type": "mining"}, "task_type", "invalid_choice"),
    ({"max_runtime_s": 10}, "max_runtime_s", "min_value"),
    ({"bid": -5}, "bid", "min_value"),
    ({"cpu": "lots"}, "cpu", "invalid"),
    ({"memory": "16GB"}, "memory", "invalid"),
    ({"memory": "1Mi"}, "memory", "range"),
    ({"privileged": True}, "privileged", "unknown_field"),
    ({"hostPath": "/"}, "hostPath", "unknown_field"),
    ({"spec": {"containers": [{"name": "x"}]}}, "spec", "unknown_field"),
    ({"securityContext": {"privileged": True}}, "securityContext", "unknown_field"),
    ({"name": "bad/name"}, "name", None),
    ({"pods": 2, "pdb_min_available": 3}, "pdb_min_available", None),
]


@pytest.mark.parametrize(("overrides", "field", "code"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_bad_submission_is_400_with_field_error_and_writes_nothing(lab, client_for, payload, overrides, field,
                                                                   code):
    before = (Job.objects.count(), JobEvent.objects.count(), SimPod.objects.count(), AuditEntry.objects.count())
    r = client_for(lab.alice).post("/api/v1/jobs", payload(**overrides), format="json")
    assert r.status_code == 400, r.content
    error = r.json()["error"]
    assert error["code"] == "validation_error"
    matching = [e for k, errs in error["fields"].items() if k == field or k.startswith(field + ".") for e in errs]
    assert matching, error
    if code:
        assert code in [e["code"] for e in matching], matching
    assert all(e["message"] for errs in error["fields"].values() for e in errs)
    after = (Job.objects.count(), JobEvent.objects.count(), SimPod.objects.count(), AuditEntry.objects.count())
    assert after == before


@pytest.mark.parametrize("missing", ["name", "image", "command", "flavor", "gpus"])
def test_required_fields(lab, client_for, payload, missing):
    body = payload()
    del body[missing]
    r = client_for(lab.alice).post("/api/v1/jobs", body, format="json")
    assert r.status_code == 400
    assert r.json()["error"]["fields"][missing][0]["code"] == "required"


def test_several_errors_are_reported_together(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(gpus=0, image="!", privileged=True), format="json")
    assert set(r.json()["error"]["fields"]) >= {"gpus", "image", "privileged"}


@pytest.mark.parametrize("body", ["not json", "[1, 2]", "null"])
def test_malformed_bodies(lab, client_for, body):
    r = client_for(lab.alice).post("/api/v1/jobs", body, content_type="application/json")
    assert r.status_code == 400
    assert r.json()["error"]["code"] in ("malformed_request", "validation_error")
    assert Job.objects.count() == 0


def test_good_images_are_accepted(lab, client_for, payload):
    for i, image in enumerate([
        "pytorch/pytorch",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "registry.lab.local:5000/team/train@sha256:" + "a" * 64,
        "ghcr.io/org/img:v1.2.3",
        "localhost:5000/img:Latest_1",
        "Registry.Example.ORG/team/img",
        "img@sha512:" + "b" * 128,
    ]):
        r = client_for(lab.alice).post("/api/v1/jobs", payload(image=image, name=f"ok-{i}"), format="json")
        assert r.status_code == 201, (image, r.content)


def test_quantities_are_parsed(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(cpu="500m", memory="2Gi"), format="json")
    assert r.status_code == 201
    assert (r.json()["cpu"], r.json()["memory"]) == ("500m", "2048Mi")


def test_an_unknown_choice_lists_the_choices_and_an_unknown_flavor_the_flavors(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(tier="gold", flavor="h100"), format="json")
    assert r.status_code == 400
    fields = r.json()["error"]["fields"]
    assert fields["tier"][0]["code"] == "invalid_choice"
    assert fields["tier"][0]["message"].endswith("Choose one of: realtime, elastic, backfill.")
    assert fields["flavor"][0]["code"] == "does_not_exist"
    assert fields["flavor"][0]["message"] == "No flavor 'h100'. The flavors are: a100-80gb, a100-mig-3g.40gb."


def test_bad_log_tail(lab, submit, client_for):
    job = submit(lab.alice)
    r = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}/logs?tail=abc")
    assert r.status_code == 400 and "tail" in r.json()["error"]["fields"]


@pytest.mark.parametrize("since", ["yesterday", "2026-01-01", "2026-01-01T00:00:00", "2026-13-01T00:00:00Z"])
def test_bad_log_since_time(lab, submit, client_for, since):
    job = submit(lab.alice)
    r = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}/logs", {"since_time": since})
    assert r.status_code == 400 and r.json()["error"]["fields"]["since_time"][0]["code"] == "invalid"


def test_bad_cancel_body(lab, submit, client_for):
    job = submit(lab.alice)
    r = client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/cancel", {"comment": "x" * 301}, format="json")
    assert r.status_code == 400 and "comment" in r.json()["error"]["fields"]
    job.refresh_from_db()
    assert job.state == "queued"


def test_one_bad_simulated_pod_does_not_stop_the_sync_for_everyone(lab, submit, go):
    """A pod row with a NaN runtime (written before submit checked it) ends at once, and a job whose sync
    fails is skipped while every other job still moves."""
    from unittest import mock

    from scheduling.services import pod_states
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    bad, good, other = (go(submit, u, name=n) for u, n in ((lab.alice, "bad"), (lab.bob, "good"),
                                                             (lab.amy, "other")))
    from django.db import connection

    # NaN as PostgreSQL stores it; SQLite turns NaN into NULL, but keeps infinity, which breaks the same way.
    SimPod.objects.filter(job_id=bad.pk).update(runtime_s=float("nan" if connection.vendor == "postgresql"
                                                                 else "inf"))
    assert go(run_cycle).admitted == 3
    real = pod_states._apply_job

    def broken_for_other(job, pods):
        if job.pk == other.pk:
            raise ValueError("a pod the sync cannot make sense of")
        return real(job, pods)

    with mock.patch.object(pod_states, "_apply_job", broken_for_other):
        counts = go(sync_cluster)
    assert counts["errors"] == 1
    states = dict(Job.objects.values_list("name", "state"))
    assert states["bad"] == "succeeded"  # its runtime ended it instead of breaking the clock arithmetic
    assert states["good"] == "running"
    assert states["other"] == "admitted"  # skipped, and retried by the next sync
    go(sync_cluster)
    assert Job.objects.get(pk=other.pk).state == "running"


def _detail_routes():
    """Every route of the API's routers that names one row by its number: (prefix, action's URL part, methods)."""
    from lab.api.urls import router as lab_router
    from portal.api.urls import router as portal_router
    from quotas.api.urls import router as quotas_router
    from scheduling.api.urls import router as scheduling_router
    from workloads.api.urls import router as workloads_router

    found = []
    for router in (scheduling_router, quotas_router, workloads_router, portal_router, lab_router):
        for prefix, viewset, _ in router.registry:
            if getattr(viewset, "lookup_field", "pk") != "pk":
                continue
            for route in router.get_routes(viewset):
                if "{lookup}" in route.url:
                    part = route.url.split("{lookup}")[1].split("{trailing_slash}")[0]
                    found.append((prefix, part.lstrip("/"), sorted(route.mapping)))
    return found


DETAIL_ROUTES = _detail_routes()


def test_the_walk_finds_the_job_actions():
    assert {("jobs", "connect"), ("jobs", "cancel"), ("jobs", "logs"), ("arrays", "")} <= {
        (prefix, part) for prefix, part, _ in DETAIL_ROUTES}


@pytest.mark.parametrize(("prefix", "part", "methods"), DETAIL_ROUTES)
@pytest.mark.parametrize("pk", ["abc", "1e3", "\u0663", "12abc", "-1"])
def test_every_action_on_a_row_that_is_not_a_number_is_a_404(lab, prefix, part, methods, pk):
    from django.test import Client

    c = Client(raise_request_exception=False)
    c.force_login(lab.alice)
    url = f"/api/v1/{prefix}/{pk}/{part}".rstrip("/") + "/"
    for method in methods:
        r = getattr(c, method)(url, {}, content_type="application/json") if method not in ("get", "head", "delete") \
            else getattr(c, method)(url)
        assert r.status_code == 404, (method, url, r.status_code, r.content[:200])


def test_a_throttle_past_the_database_integer_or_not_in_ascii_digits_is_a_400_with_the_field(lab, client_for, payload):
    for array in ("0-9%2147483648", "0-9%\u00b2", "0-9%" + "9" * 400, "0-" + "9" * 400, "\u0660-\u0663"):
        r = client_for(lab.alice).post("/api/v1/arrays", {**payload(), "array": array}, format="json")
        assert r.status_code == 400, (array, r.status_code, r.content[:300])
        assert "array" in r.json()["error"]["fields"], r.json()
    assert not Job.objects.exists()
