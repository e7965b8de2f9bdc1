"""The idle-time benchmark's classification of free GPUs after a cycle (benchmarks/idle.py), on real engine
decisions."""

from dataclasses import replace

from benchmarks.idle import CLASSES, Recording, classify, idle_shares
from engine import schedule
from engine.types import Node, PendingJob, Quota, RunningJob, Snapshot

NOW = 100_000.0
HOUR = 3600.0
EVEN = (Quota("A", "a100", 8), Quota("B", "a100", 8))


def _snap(running=(), pending=(), quotas=EVEN):
    return Snapshot(now=NOW, nodes=(Node("n0", "a100", 8),), running=tuple(running), pending=tuple(pending),
                    quotas=tuple(quotas))  # fmt: skip


def _run(id, gpus, dept="A", hours=10.0, ran=60.0):
    return RunningJob(id=id, department=dept, flavor="a100", tier="elastic", placement=("n0",), gpus_per_pod=gpus,
                      started_at=NOW - ran, max_runtime_s=hours * HOUR, submitted_at=NOW - ran)  # fmt: skip


def _job(id, gpus, dept="A", hours=1.0, waited=HOUR):
    return PendingJob(id=id, department=dept, flavor="a100", gpus_per_pod=gpus, max_runtime_s=hours * HOUR,
                      submitted_at=NOW - waited)  # fmt: skip


def _classes(snap):
    return dict(classify(snap, schedule(snap)))


def test_nothing_pending():
    assert _classes(_snap([_run(1, 4)])) == {"nothing pending": 4}


def test_a_job_that_fits_but_would_delay_the_reserved_head():
    # the 8-GPU head reserves the node for when the 6-GPU job ends; the 2-GPU job would run past that
    snap = _snap([_run(1, 6)], [_job(2, 8, waited=2 * HOUR), _job(3, 2, hours=20.0)])
    assert _classes(snap) == {"held for a reservation": 2}


def test_free_gpus_waiting_with_a_job_for_its_victims():
    rt = PendingJob(id=2, department="A", flavor="a100", tier="realtime", gpus_per_pod=4, submitted_at=NOW)
    snap = _snap([_run(1, 6, dept="B", ran=HOUR)], [rt])
    assert _classes(snap) == {"victims leaving": 2}


def test_no_pending_job_fits_the_free_gpus():
    assert _classes(_snap([_run(1, 6)], [_job(2, 4)])) == {"no pending job fits": 2}


def test_a_job_held_by_its_quota():
    snap = _snap([_run(1, 2)], [_job(2, 2)], quotas=(Quota("A", "a100", 2, 0), Quota("B", "a100", 6)))
    assert _classes(snap) == {"held by quota": 6}


def test_shares_weight_each_cycle_by_the_time_to_the_next_within_the_window():
    cycles = [(0.0, {"no pending job fits": 2}), (10.0, {"nothing pending": 4}), (30.0, {}), (40.0, {})]
    shares = idle_shares(cycles, capacity=4, window=(5.0, 20.0))
    assert set(shares) == set(CLASSES)
    # 2 GPUs x 5 s and 4 GPUs x 10 s of 4 GPUs x 15 s
    assert abs(shares["no pending job fits"] - 10 / 60) < 1e-9
    assert abs(shares["nothing pending"] - 40 / 60) < 1e-9


def _resizable(id, pods, dept="A", resizing=False):
    return RunningJob(id=id, department=dept, flavor="a100", tier="elastic", placement=("n0",) * pods,
                      gpus_per_pod=1, started_at=NOW - HOUR, max_runtime_s=10 * HOUR, submitted_at=NOW - HOUR,
                      checkpoint_interval_s=600.0, min_pods=2, max_pods=6, resizing=resizing)  # fmt: skip


def test_a_grows_new_gpus_are_held_for_its_answer_until_the_resize_is_done():
    rec = Recording()
    rec(_snap([_resizable(1, 2)]))  # it grows into 4 of the 6 idle GPUs
    rec(_snap([_resizable(1, 6, resizing=True)]))  # the answer is pending: the engine sees all 6 as its
    rec(_snap([_resizable(1, 6)]))  # done: it computes on them
    assert [dict(c) for _, c in rec.cycles] == [
        {"held for a grow's answer": 4, "nothing pending": 2},
        {"held for a grow's answer": 4, "nothing pending": 2},
        {"nothing pending": 2},
    ]


def test_gpus_a_shrink_gave_back_count_apart_until_a_job_takes_them():
    rec = Recording()
    b4 = PendingJob(id=2, department="B", flavor="a100", gpus_per_pod=1, pods=4, max_runtime_s=HOUR,
                    submitted_at=NOW - HOUR)  # fmt: skip
    b2 = replace(b4, id=3, pods=2)
    full = Quota("A", "a100", 2, 0)  # A may not grow back past its quota of 2
    rec(_snap([_resizable(1, 6), _run(9, 2, dept="B")], [b4], quotas=(full, Quota("B", "a100", 6))))
    # the shrink is done but B's 4-GPU job was withdrawn: the 4 GPUs it gave back stay idle, then 2 are taken
    rec(_snap([_resizable(1, 2), _run(9, 2, dept="B")], quotas=(full, Quota("B", "a100", 6))))
    rec(_snap([_resizable(1, 2), _run(9, 2, dept="B")], [b2], quotas=(full, Quota("B", "a100", 6))))
    assert [dict(c) for _, c in rec.cycles][1:] == [
        {"freed by a shrink, not yet reused": 4},
        {"freed by a shrink, not yet reused": 2},
    ]
