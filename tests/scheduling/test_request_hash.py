"""A submission's stored hash (idempotent retries compare it) keeps the key the per-pod GPU count had when the
rows were written, ``gpus``, though the code now names it ``gpus_per_pod``: a retry that spans the rename still
matches its job instead of being refused as another request."""

from __future__ import annotations

import hashlib
import json

import pytest

from scheduling.api.serializers import JobBatchSubmitSerializer, JobSubmitSerializer
from scheduling.models import Job

pytestmark = pytest.mark.django_db


def _digest_as_stored_before(data) -> str:
    """The hash the code computed before the rename: the validated body with the per-pod count as ``gpus``."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _wire_keys(item: dict) -> dict:
    out = dict(item)
    out["gpus"] = out.pop("gpus_per_pod")
    return out


def test_a_single_job_keeps_the_hash_it_had_before_the_rename(lab, client_for, payload):
    body = payload(gpus=2, pods=2)
    s = JobSubmitSerializer(data=body)
    s.is_valid(raise_exception=True)
    c = client_for(lab.alice)
    first = c.post("/api/v1/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="cell-1")
    assert first.status_code == 201, first.content
    job = Job.objects.get(pk=first.json()["id"])
    assert job.request_hash == _digest_as_stored_before(_wire_keys(s.validated_data))
    again = c.post("/api/v1/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="cell-1")
    assert (again.status_code, again.json()["id"], Job.objects.count()) == (200, job.pk, 1)


def test_a_batch_keeps_the_hash_it_had_before_the_rename(lab, client_for, payload):
    body = {"jobs": [payload(name="a", gpus=1), payload(name="b", gpus=2)]}
    s = JobBatchSubmitSerializer(data=body)
    s.is_valid(raise_exception=True)
    r = client_for(lab.alice).post("/api/v1/jobs/batch", body, format="json", HTTP_IDEMPOTENCY_KEY="batch-1")
    assert r.status_code == 201, r.content
    expected = _digest_as_stored_before({"jobs": [_wire_keys(i) for i in s.validated_data["jobs"]]})
    assert set(Job.objects.values_list("request_hash", flat=True)) == {expected}
