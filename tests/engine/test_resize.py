"""Resizable jobs (``engine.resize``): admitted at the largest size of their range that fits without displacing
anyone, grown into GPUs left idle, shrunk (never below their minimum) before any whole job is preempted for the
same GPUs, and the job that takes their GPUs waits for the shrink at their next checkpoint."""

from __future__ import annotations

from core_builders import NOW, Snap, job, run

from engine import reasons
from engine.resize import speedup

HOUR = 3600.0


def test_admitted_at_the_largest_size_that_fits():
    r = Snap().nodes(1, gpus=8).quota("A", 8).running(run(9, on=("n0",) * 3)).pending(
        job(1, pods=8, min_pods=2)).decide()
    assert len(r.placement(1)) == 5  # 3 of 8 GPUs are busy: 5 pods of 1 GPU, within its range 2..8


def test_admitted_at_its_maximum_when_it_all_fits():
    r = Snap().nodes(1, gpus=8).quota("A", 8).pending(job(1, pods=4, gpus=2, min_pods=1)).decide()
    assert len(r.placement(1)) == 4


def test_waits_at_its_minimum_when_not_even_that_fits():
    r = Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4, borrow=4).running(
        run(9, dept="B", on=("n0",) * 7)).pending(job(1, pods=8, min_pods=2)).decide()
    assert r.code(1) != "admitted"
    assert r.reason[1].detail["requested"] == 2  # judged (and reclaiming lent GPUs) at its minimum


def test_the_quota_caps_the_size():
    r = Snap().nodes(1, gpus=8).quota("A", 3, borrow=0).quota("B", 5).pending(job(1, pods=8, min_pods=2)).decide()
    assert len(r.placement(1)) == 3


def test_a_fixed_size_job_is_not_resized():
    r = Snap().nodes(1, gpus=8).quota("A", 8).running(run(9, on=("n0",) * 3)).pending(job(1, pods=8)).decide()
    assert r.code(1) != "admitted"


def _resizable(id, on, lo, hi, **kw):
    kw.setdefault("checkpoint_interval_s", 600.0)
    return run(id, on=on, min_pods=lo, max_pods=hi, **kw)


def test_a_running_resizable_job_grows_into_idle_gpus():
    r = Snap().nodes(1, gpus=8).quota("A", 8).running(_resizable(5, ("n0",) * 2, 2, 6)).pending(
        job(1, pods=1, held=True)).decide()
    [resize] = r.raw.resizes
    assert (resize.job_id, resize.direction, resize.reason, resize.pods) == (5, "up", "idle", 6)
    assert resize.placement[:2] == ("n0", "n0")


def test_growth_stops_at_the_borrowing_limit():
    r = Snap().nodes(1, gpus=8).quota("A", 2, borrow=1).quota("B", 6).running(
        _resizable(5, ("n0",) * 2, 2, 8)).pending(job(1, held=True)).decide()
    [resize] = r.raw.resizes
    assert resize.pods == 3


def test_no_resize_while_one_is_in_flight():
    r = Snap().nodes(1, gpus=8).quota("A", 8).running(_resizable(5, ("n0",) * 2, 2, 6, resizing=True)).pending(
        job(1, held=True)).decide()
    assert r.raw.resizes == ()


def test_a_pending_job_takes_the_grown_gpus_and_waits_for_the_shrink():
    # 6 pods of 1 GPU, minimum 2: 4 of them are soft. A 4-GPU job of B takes them instead of waiting.
    r = Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4).running(
        _resizable(5, ("n0",) * 6, 2, 6), run(6, dept="B", on=("n0",) * 2)).pending(
        job(1, dept="B", pods=4)).decide()
    assert r.code(1) == reasons.WAITING_FOR_RESIZE
    assert r.reason[1].detail["resizing"] == [5]
    [resize] = r.raw.resizes
    assert (resize.job_id, resize.direction, resize.reason, resize.for_job) == (5, "down", "for_job", 1)
    assert resize.pods == 2  # never below its minimum
    assert r.victims == set()


def test_it_shrinks_before_any_whole_job_is_preempted():
    # A realtime job needs 4 GPUs on a full node: the resizable job's soft pods give them, no victim is chosen.
    r = Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4).running(
        _resizable(5, ("n0",) * 4, 2, 4), run(6, dept="B", on=("n0",) * 4, ran=2 * HOUR)).pending(
        job(1, dept="B", pods=2, gpus=1, tier="realtime")).decide()
    assert r.victims == set()
    assert r.code(1) == reasons.WAITING_FOR_RESIZE
    assert [(x.job_id, x.pods) for x in r.raw.resizes] == [(5, 2)]


def test_soft_pods_nobody_takes_stay():
    r = Snap().nodes(1, gpus=8).quota("A", 8).running(_resizable(5, ("n0",) * 6, 2, 6)).pending(
        job(1, pods=4, held=True)).decide()
    assert r.raw.resizes == ()


def test_it_does_not_grow_onto_gpus_a_reserved_head_needs_soon():
    # B's 8-GPU head reserves the node from the end of the 2-GPU job (in 30 min): the resizable job (checkpoint
    # every 10 min) may not grow into its holes; with checkpoints every 2 hours it could not give them back.
    base = Snap().nodes(1, gpus=8).quota("A", 2, borrow=6).quota("B", 4, borrow=4).quota("C", 2).policy(
        quota_reservation_age_s=60.0)
    snap = base.running(run(7, dept="C", on=("n0",) * 2, ran=HOUR, max_runtime_s=HOUR + 1800),
                        _resizable(5, ("n0",) * 2, 2, 6, checkpoint_interval_s=7200.0)).pending(
        job(1, dept="B", pods=8, submitted_at=NOW - HOUR))
    r = snap.decide()
    assert r.reason[1].detail.get("reserved_from") == NOW + 1800
    assert r.raw.resizes == ()


def test_it_grows_onto_a_heads_gpus_due_after_its_next_checkpoint():
    # B's 8-GPU head reserves the node from the end of the 2-GPU job (in 30 min); the resizable job checkpoints
    # every 20 min, so it can give the grown GPUs back before the head is due: it grows. Within two checkpoints
    # of the head's start it would have kept off, leaving 4 GPUs idle for half an hour.
    base = Snap().nodes(1, gpus=8).quota("A", 2, borrow=6).quota("B", 4, borrow=4).quota("C", 2).policy(
        quota_reservation_age_s=60.0)
    snap = base.running(run(7, dept="C", on=("n0",) * 2, ran=HOUR, max_runtime_s=HOUR + 1800),
                        _resizable(5, ("n0",) * 2, 2, 6, checkpoint_interval_s=1200.0)).pending(
        job(1, dept="B", pods=8, submitted_at=NOW - HOUR))
    r = snap.decide()
    assert r.reason[1].detail.get("reserved_from") == NOW + 1800
    assert [(x.job_id, x.direction, x.pods) for x in r.raw.resizes] == [(5, "up", 6)]


def test_it_grows_into_a_far_reservation_it_can_give_back():
    base = Snap().nodes(1, gpus=8).quota("A", 2, borrow=6).quota("B", 4, borrow=4).quota("C", 2).policy(
        quota_reservation_age_s=60.0)
    snap = base.running(run(7, dept="C", on=("n0",) * 2, ran=HOUR, max_runtime_s=10 * HOUR),
                        _resizable(5, ("n0",) * 2, 2, 6, checkpoint_interval_s=600.0)).pending(
        job(1, dept="B", pods=8, submitted_at=NOW - HOUR))
    r = snap.decide()
    assert r.reason[1].detail.get("reserved_from") == NOW + 9 * HOUR
    assert [(x.job_id, x.direction, x.pods) for x in r.raw.resizes] == [(5, "up", 6)]


def test_the_scaling_efficiency():
    assert speedup(4, 4) == 1.0
    assert abs(speedup(8, 4) - 1.8) < 1e-9  # 0.9 per doubling
    assert abs(speedup(2, 8) - 1 / 1.8 ** 2) < 1e-9
