"""A resizable job's request: a size range (``min_pods`` to ``pods``) on a batch job of one GPU role that
checkpoints, and optionally its global batch size. Each bad input is a 400 on its field that writes nothing."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry
from scheduling.models import Job, JobEvent

pytestmark = pytest.mark.django_db

CKPT = {"checkpoint_interval_s": 600}

BAD = [
    # (overrides, field, code)
    ({"pods": 2, "min_pods": 3, **CKPT}, "min_pods", "min_above_max"),
    ({"pods": 2, "min_pods": 0, **CKPT}, "min_pods", "min_value"),
    ({"pods": 2, "min_pods": "1", **CKPT}, "min_pods", "invalid"),
    ({"pods": 2, "min_pods": 1}, "checkpoint_interval_s", "resizable_needs_checkpoints"),
    ({"min_pods": 1, "kind": "session", "tier": "realtime", "port": 8888, **CKPT}, "min_pods",
     "resizable_kind"),
    ({"pods": 3, "gpus": 4, "min_pods": 1, **CKPT}, "pods", "exceeds_largest_pool"),  # the maximum never fits
    ({"pods": 2, "global_batch_size": 64, **CKPT}, "global_batch_size", "batch_needs_size_range"),
    ({"pods": 2, "gpus": 2, "min_pods": 1, "global_batch_size": 3, **CKPT}, "global_batch_size", "batch_too_small"),
    ({"pods": 2, "min_pods": 1, "global_batch_size": 0, **CKPT}, "global_batch_size", "min_value"),
]


@pytest.mark.parametrize(("overrides", "field", "code"), BAD, ids=[f"{b[1]}-{b[2]}" for b in BAD])
def test_a_bad_size_range_is_400_on_its_field_and_writes_nothing(lab, client_for, payload, overrides, field, code):
    before = (Job.objects.count(), JobEvent.objects.count(), AuditEntry.objects.count())
    r = client_for(lab.alice).post("/api/v1/jobs", payload(**overrides), format="json")
    assert r.status_code == 400, r.content
    fields = r.json()["error"]["fields"]
    assert code in [e["code"] for e in fields.get(field, [])], fields
    assert (Job.objects.count(), JobEvent.objects.count(), AuditEntry.objects.count()) == before


def test_a_size_range_is_kept_and_shown(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(pods=2, min_pods=1, global_batch_size=256, **CKPT),
                                   format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["pods"], body["min_pods"], body["global_batch_size"]) == (2, 1, 256)
    job = Job.objects.get(pk=body["id"])
    assert (job.pods, job.min_pods, job.global_batch_size) == (2, 1, 256)


def test_a_fixed_size_job_shows_no_range(lab, client_for, payload):
    body = client_for(lab.alice).post("/api/v1/jobs", payload(), format="json").json()
    assert (body["min_pods"], body["global_batch_size"]) == (None, None)
