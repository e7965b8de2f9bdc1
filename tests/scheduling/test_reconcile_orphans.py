"""The reconciler clears the pods of ended attempts in chunks: one message per chunk, not per attempt."""

from __future__ import annotations

from scheduling.models import SimPod
from scheduling.services import reconcile as reconciler
from scheduling.services.reconcile import reconcile


def _orphans(n: int) -> None:
    SimPod.objects.bulk_create(
        [SimPod(namespace="gpu-vision", name=f"job-{9000 + i}-a1", job_id=9000 + i, attempt=1) for i in range(n)]
    )


def test_orphans_are_cleared_with_one_message_per_chunk(lab, go, monkeypatch):
    sent = []
    real = reconciler.dispatch.send_now

    def record(name, *args):
        sent.append((name, len(args[0]) if name.endswith("_many") else 1))
        return real(name, *args)

    monkeypatch.setattr(reconciler.dispatch, "send_now", record)
    _orphans(2 * reconciler.ORPHANS_PER_MESSAGE + 5)

    counts = go(reconcile)

    assert counts["orphans_deleted"] == 2 * reconciler.ORPHANS_PER_MESSAGE + 5
    assert sent == [("scheduling.pods.remove_many", reconciler.ORPHANS_PER_MESSAGE)] * 2 + [
        ("scheduling.pods.remove_many", 5)]
    assert not SimPod.objects.filter(job_id__gte=9000).exists()
    assert go(reconcile).get("orphans_deleted", 0) == 0


def test_an_orphan_whose_removal_fails_is_retried_alone_and_stops_no_other(lab, go, monkeypatch):
    from scheduling import tasks

    _orphans(3)
    real = tasks.pods.remove_pods
    alone = []

    def flaky(*, job_id, **kw):
        if job_id == 9001:
            raise RuntimeError("the API server hung up")
        return real(job_id=job_id, **kw)

    monkeypatch.setattr(tasks.pods, "remove_pods", flaky)
    monkeypatch.setattr(tasks.remove_pods, "delay", lambda *a: alone.append(a))

    outcome = tasks.remove_pods_many([[9000 + i, 1, "gpu-vision", "default"] for i in range(3)])

    assert outcome == {"removed": 2, "retrying": 1}
    assert alone == [(9001, 1, "gpu-vision", "default")]
    assert list(SimPod.objects.filter(job_id__gte=9000).values_list("job_id", flat=True)) == [9001]
