"""The REST submit path stays cheap: a pinned query budget, and a response rendered from memory that is the
same as what the detail endpoint reads back."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def bearer(lab):
    from rest_framework.test import APIClient

    _, raw = ApiToken.issue(user=lab.alice, name="nb")
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


@pytest.fixture
def no_pod_tasks(monkeypatch):
    """Pod creation runs in a worker in production; keep its queries out of the request's count."""
    from scheduling import tasks

    monkeypatch.setattr(tasks.create_pods, "delay", lambda *a, **k: None)
    monkeypatch.setattr(tasks.create_pods_many, "delay", lambda *a, **k: None)


def test_submit_query_budget(lab, bearer, payload, no_pod_tasks, django_capture_on_commit_callbacks):
    bearer.post("/api/v1/jobs", payload(name="warm"), format="json")  # token bookkeeping write happens once
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        r = bearer.post("/api/v1/jobs", payload(), format="json", HTTP_IDEMPOTENCY_KEY="cell-1")
    assert r.status_code == 201, r.content
    sql = [x["sql"] for x in q.captured_queries]
    # token with its user's membership and department (one read), flavor with its largest node, the flavor's
    # pools per cluster (a gang that fits no cluster is refused), the member's waiting-jobs limit, the
    # department's quota ceiling, approval rule with the allowance (one read), job, event, its role, queue position
    # (+ transaction statements). It was 18 before the flavor and read-back queries were folded, 10 before the
    # rule and the allowance were, 9 before the gang, ceiling and per-member checks, 12 before the membership
    # came with the token; 11 before every job got its role row (docs/workloads.md, "Shapes"); 12 before the
    # department's preemption limit was read (once per submission, whatever its size).
    assert len(sql) <= 13, "\n".join(sql)
    assert not any('FROM "portal_membership"' in s for s in sql), "the membership comes with the token"
    assert sum('"quotas_allowance"' in s for s in sql) == 1 and sum('"quotas_approvalrule"' in s for s in sql) == 1
    assert sum('FROM "quotas_allowance"' in s and '"quotas_approvalrule"' in s for s in sql) == 1
    assert sum('FROM "quotas_flavor"' in s for s in sql) == 1
    assert sum('FROM "scheduling_node"' in s for s in sql) <= 1


def test_submit_response_is_what_the_detail_endpoint_reads_back(lab, bearer, payload):
    r = bearer.post("/api/v1/jobs", payload(gpus=2, pods=2, deadline="2099-01-01T12:00:00+02:00",
                                            env={"A": "1"}, cpu="500m", memory="2Gi", tier="realtime"),
                    format="json", HTTP_IDEMPOTENCY_KEY="same")
    assert r.status_code == 201, r.content
    detail = bearer.get(f"/api/v1/jobs/{r.json()['id']}")
    created = r.json()
    assert created.pop("warnings") == []  # the submission's own answer: the job, plus any warnings about it
    assert created == detail.json()
    replay = bearer.post("/api/v1/jobs", payload(gpus=2, pods=2, deadline="2099-01-01T12:00:00+02:00",
                                                 env={"A": "1"}, cpu="500m", memory="2Gi", tier="realtime"),
                         format="json", HTTP_IDEMPOTENCY_KEY="same")
    replayed = replay.json()
    assert replay.status_code == 200 and replayed.pop("warnings") == [] and replayed == detail.json()


def test_idempotency_key_reused_with_another_body_is_refused_and_creates_nothing(lab, bearer, payload):
    from scheduling.models import Job

    assert bearer.post("/api/v1/jobs", payload(), format="json", HTTP_IDEMPOTENCY_KEY="k").status_code == 201
    r = bearer.post("/api/v1/jobs", payload(gpus=2), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_reused", r.content
    assert Job.objects.filter(owner=lab.alice).count() == 1


def test_gpus_above_the_largest_node_is_a_field_error_beside_others(lab, bearer, payload):
    r = bearer.post("/api/v1/jobs", payload(gpus=5, image="Not An Image"), format="json")
    assert r.status_code == 400
    body = r.json()
    assert "gpus" in str(body) and "image" in str(body) and "exceeds_largest_node" in str(body)
