"""Fractional GPUs in the engine: shares of one GPU placed per device, packed before a GPU is opened, never
oversubscribed, and a shared GPU never given whole."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from core_builders import NOW, Snap, job, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import schedule
from engine.fractions import HAMI, REPLICAS, Share, fraction, fraction_of
from engine.types import Node, PendingJob, Quota, RunningJob, Snapshot

A100 = 40 * 1024  # MiB
HOUR = 3600.0
NEVER = 1e12  # a run time no reservation reaches


def hami(gib: float, cores: int = 0) -> Share:
    return Share(HAMI, A100, memory_mib=int(gib * 1024), cores=cores)


def frac(id: int, share: Share, **kw) -> PendingJob:
    return job(id, gpus=1, share=share, **kw)


def test_the_fraction_is_the_larger_of_memory_and_compute():
    assert fraction(hami(10)) == 250
    assert fraction(hami(10, cores=80)) == 800  # what it denies others is what it uses
    assert fraction(Share(REPLICAS, 4, replicas=1)) == 250
    assert fraction(Share(REPLICAS, 3, replicas=1)) == 333
    assert fraction_of(HAMI, A100, memory_mib=1) == 1  # never 0: every fraction costs something
    assert fraction(hami(40)) == 1000


def test_fractions_pack_onto_a_shared_gpu_before_opening_another():
    r = Snap().nodes(1, gpus=2).quota("A", 2).pending(*(frac(i, hami(10)) for i in range(1, 5))).decide()
    assert {r.admitted[i].devices for i in range(1, 5)} == {(0,)}  # four quarters on one GPU
    assert all(r.placement(i) == ("n0",) for i in range(1, 5))


def test_a_fifth_quarter_opens_a_second_gpu():
    r = Snap().nodes(1, gpus=2).quota("A", 2).pending(*(frac(i, hami(10)) for i in range(1, 6))).decide()
    assert sorted(r.admitted[i].devices[0] for i in range(1, 6)) == [0, 0, 0, 0, 1]


def test_a_shared_gpu_is_not_free_to_a_whole_gpu_job():
    # one GPU, a quarter of it running: a whole-GPU job waits although 30 GiB are free on it
    r = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1)
         .running(run(1, on="n0", gpus=1, share=hami(10), devices=(0,)))
         .pending(job(2, dept="B")).decide())
    assert r.code(2) != "admitted"
    assert r.reason[2].code in ("no_capacity", "quota_lent_out", "quota_exhausted", "waiting_for_higher_priority")


def test_a_running_fraction_leaves_room_on_its_gpu_for_another():
    r = (Snap().nodes(1, gpus=1).quota("A", 1)
         .running(run(1, on="n0", gpus=1, share=hami(30), devices=(0,)))
         .pending(frac(2, hami(10)), frac(3, hami(1))).decide())
    assert r.admitted[2].devices == (0,)
    assert r.code(3) != "admitted"  # 30 + 10 GiB fill the 40 GiB GPU: never more


def test_compute_shares_are_never_oversubscribed_either():
    r = Snap().nodes(1, gpus=1).quota("A", 1).pending(frac(1, hami(1, cores=60)), frac(2, hami(1, cores=60))).decide()
    assert r.code(1) == "admitted" and r.code(2) != "admitted"


def test_a_new_shared_gpu_opens_on_the_fullest_node():
    # n0 has 1 GPU free, n1 is empty: the fraction opens n0's last GPU and keeps n1 whole for whole-GPU work
    r = (Snap().nodes(2, gpus=4).quota("A", 8)
         .running(run(1, on=("n0", "n0", "n0"), gpus=1))
         .pending(frac(2, hami(10))).decide())
    assert r.placement(2) == ("n0",)


def test_a_quarter_uses_a_quarter_of_the_quota():
    # nominal 1 GPU, no borrowing: four quarters fit it, a fifth waits on the quota
    r = (Snap().nodes(1, gpus=4).quota("A", 1, borrow=0)
         .pending(*(frac(i, hami(10)) for i in range(1, 6))).decide())
    assert [r.code(i) for i in range(1, 5)] == ["admitted"] * 4
    assert r.code(5) == "quota_exhausted"
    assert r.reason[5].detail["requested"] == 0.25 and r.reason[5].detail["in_use"] == 1
    assert "0.25 requested" in r.reason[5].message


def test_a_wait_says_the_cohorts_idle_share_in_gpus():
    # B runs a quarter of its nominal 1, so 1.75 of the cohort's 2 are idle: too few for A's gang of 2
    r = (Snap().nodes(1, gpus=4).quota("A", 1).quota("B", 1)
         .running(run(1, dept="B", on="n0", gpus=1, share=hami(10), devices=(0,)))
         .pending(job(2, gpus=2)).decide())
    assert r.code(2) == "quota_exhausted"
    assert r.reason[2].detail["cohort_idle"] == 1.75 and r.reason[2].detail["nominal"] == 1
    assert "1.75 idle in the cohort" in r.reason[2].message  # a number, not "7/4"


def test_a_quota_wait_is_estimated_from_what_each_fraction_gives_back():
    # nominal 2: a whole GPU until +3 h, halves until +1 h and +2 h. One more GPU fits the quota once both
    # halves are gone (at +1 h the department still holds 1.5), not when the first ends
    r = (Snap().nodes(1, gpus=8).quota("A", 2, borrow=0)
         .running(run(1, on="n0", gpus=1, ran=0.0, max_runtime_s=3 * HOUR),
                  run(2, on="n0", gpus=1, share=hami(20), devices=(0,), ran=0.0, max_runtime_s=HOUR),
                  run(3, on="n0", gpus=1, share=hami(20), devices=(0,), ran=0.0, max_runtime_s=2 * HOUR))
         .pending(job(4)).decide())
    assert r.code(4) == "quota_exhausted"
    assert r.reason[4].estimated_start == NOW + 2 * HOUR


def test_a_whole_gpu_job_is_estimated_to_start_when_the_last_fraction_on_the_gpu_ends():
    # the only GPU holds a half until +1 h and a quarter until +2 h: it is whole again at +2 h, not +1 h
    r = (Snap().nodes(1, gpus=1).quota("A", 4)
         .running(run(1, on="n0", gpus=1, share=hami(20), devices=(0,), ran=0.0, max_runtime_s=HOUR),
                  run(2, on="n0", gpus=1, share=hami(10), devices=(0,), ran=0.0, max_runtime_s=2 * HOUR))
         .pending(job(3)).decide())
    assert r.code(3) == "no_capacity"
    assert r.reason[3].estimated_start == NOW + 2 * HOUR


def test_a_fraction_alone_on_its_gpu_is_a_victim_and_loses_the_least_work():
    # B's whole-GPU job and B's quarter alone on the other GPU, both past the cooldown: a realtime job of A
    # evicts the quarter, which frees a GPU and loses a quarter of a GPU's work
    r = (Snap().nodes(1, gpus=2).quota("A", 2).quota("B", 2)
         .running(run(1, dept="B", on="n0", gpus=1, ran=2 * HOUR, max_runtime_s=9 * HOUR),
                  run(2, dept="B", on="n0", gpus=1, share=hami(10), devices=(1,), ran=2 * HOUR,
                      max_runtime_s=9 * HOUR))
         .pending(job(3, tier="realtime")).decide())
    assert r.victims == {2}


def test_fractions_sharing_a_gpu_are_no_victims():
    # the same, with two quarters on that GPU: evicting one frees nothing, so the whole-GPU job goes
    r = (Snap().nodes(1, gpus=2).quota("A", 2).quota("B", 2)
         .running(run(1, dept="B", on="n0", gpus=1, ran=2 * HOUR, max_runtime_s=9 * HOUR),
                  run(2, dept="B", on="n0", gpus=1, share=hami(10), devices=(1,), ran=2 * HOUR,
                      max_runtime_s=9 * HOUR),
                  run(4, dept="B", on="n0", gpus=1, share=hami(10), devices=(1,), ran=2 * HOUR,
                      max_runtime_s=9 * HOUR))
         .pending(job(3, tier="realtime")).decide())
    assert r.victims == {1}


def test_a_fraction_keeps_the_cooldown_and_its_disruption_budget():
    alone = dict(dept="B", on="n0", gpus=1, share=hami(10), devices=(0,), max_runtime_s=9 * HOUR)
    fresh = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1).running(run(2, ran=60.0, **alone))
             .pending(job(3, tier="realtime")).decide())
    assert not fresh.victims and fresh.code(3) == "preemption_cooldown"
    budgeted = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1).budget("nb", 0)
                .running(run(2, ran=2 * HOUR, disruption_budgets=("nb",), **alone))
                .pending(job(3, tier="realtime")).decide())
    assert not budgeted.victims and budgeted.code(3) == "disruption_budget"


def test_replicas_count_per_gpu():
    share = Share(REPLICAS, 4, replicas=2)
    r = Snap().nodes(1, gpus=1).quota("A", 1).pending(frac(1, share), frac(2, share), frac(3, share)).decide()
    assert [r.code(i) for i in (1, 2)] == ["admitted", "admitted"] and r.code(3) != "admitted"


def test_a_fractional_wait_says_what_a_whole_one_says():
    whole = (Snap().nodes(1, gpus=1).quota("A", 2).running(run(1, on="n0", gpus=1))
             .pending(job(2)).decide()).reason[2]
    part = (Snap().nodes(1, gpus=1).quota("A", 2).running(run(1, on="n0", gpus=1))
            .pending(frac(2, hami(10))).decide()).reason[2]
    assert part.code == whole.code
    assert part.estimated_start == whole.estimated_start


def test_a_head_does_not_reserve_a_gpu_that_fractions_share():
    # n0 is whole again at +1 h by its holders' declared ends, n1 at +2 h. A session may join n0's shared GPU
    # at any moment (realtime, judged before the head), pushing that hour back: the node gang reserves n1
    session = dict(on="n0", gpus=1, share=hami(10), devices=(0,), tier="realtime", ran=0.0, max_runtime_s=HOUR)
    r = (Snap().nodes(2, gpus=2).quota("A", 8)
         .running(run(1, **session), run(2, on="n0", gpus=1, ran=0.0, max_runtime_s=HOUR),
                  run(3, on=("n1", "n1"), gpus=1, ran=0.0, max_runtime_s=2 * HOUR))
         .pending(job(4, gpus=2, max_runtime_s=HOUR)).decide())
    assert r.code(4) == "no_capacity"
    assert r.reason[4].detail["reserved_from"] == NOW + 2 * HOUR


def test_work_behind_a_head_is_not_held_for_a_shared_gpu():
    # one node, three GPUs free and one shared: the node gang can start only once the GPU is whole, which no
    # instant promises, so it holds nothing and a 3-hour job of a lower tier starts on the free GPUs meanwhile
    r = (Snap().nodes(1, gpus=4).quota("A", 8)
         .running(run(1, on="n0", gpus=1, share=hami(10), devices=(0,), tier="realtime", ran=0.0,
                      max_runtime_s=HOUR))
         .pending(job(2, gpus=4, max_runtime_s=HOUR), job(3, tier="backfill", max_runtime_s=3 * HOUR))
         .decide())
    assert r.code(2) == "no_capacity" and "reserved_from" not in r.reason[2].detail
    assert r.code(3) == "admitted"


# ---------------------------------------------------------------- properties

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mixed(draw):
    nodes = tuple(Node(f"n{i}", "a100", draw(st.sampled_from([1, 2, 4]))) for i in range(draw(st.integers(1, 3))))
    running: list[RunningJob] = []
    jid = 1
    for n in nodes:  # some whole-GPU work and some shared GPUs already running
        whole = draw(st.integers(0, n.gpus))
        if whole:
            running.append(RunningJob(jid, "A", "a100", "elastic", (n.name,) * whole, 1, NOW - 7200))
            jid += 1
        for d in range(draw(st.integers(0, n.gpus - whole))):
            for _ in range(draw(st.integers(1, 3))):
                running.append(RunningJob(jid, "C", "a100", "realtime", (n.name,), 1, NOW - 7200,
                                          share=hami(draw(st.sampled_from([5, 10]))), devices=(d,)))
                jid += 1
    pending = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            share = hami(draw(st.sampled_from([1, 5, 10, 20, 30])), draw(st.sampled_from([0, 0, 30, 60])))
            pending.append(PendingJob(jid, draw(st.sampled_from("AB")), "a100", tier=draw(st.sampled_from(
                ["realtime", "elastic"])), pods=draw(st.integers(1, 2)), gpus_per_pod=1, share=share, submitted_at=NOW))
        else:
            pending.append(PendingJob(jid, draw(st.sampled_from("AB")), "a100", pods=1,
                                      gpus_per_pod=draw(st.sampled_from([1, 2])), submitted_at=NOW))
        jid += 1
    return Snapshot(now=NOW, nodes=nodes, running=tuple(running), pending=tuple(pending),
                    quotas=(Quota("A", "a100", 8), Quota("B", "a100", 8), Quota("C", "a100", 12)))


@SETTINGS
@given(mixed())
def test_never_oversubscribed_and_a_shared_gpu_never_given_whole(snap):
    result = schedule(snap)
    gpus = {n.name: n.gpus for n in snap.nodes}
    whole = defaultdict(int)
    shared: dict[tuple[str, int], list[Share]] = defaultdict(list)
    for r in snap.running:
        if r.share is None:
            for name in r.placement:
                whole[name] += r.gpus_per_pod
        else:
            for name, d in zip(r.placement, r.devices, strict=True):
                shared[(name, d)].append(r.share)
    by_id = {j.id: j for j in snap.pending}
    opened_before = set(shared)
    for adm in result.admissions:
        j = by_id[adm.job_id]
        if j.share is None:
            for name in adm.placement:
                whole[name] += j.gpus_per_pod
        else:
            assert len(adm.devices) == len(adm.placement)
            for name, d in zip(adm.placement, adm.devices, strict=True):
                shared[(name, d)].append(j.share)
    for shares in shared.values():
        assert sum(s.memory_mib for s in shares) <= A100
        assert sum(s.cores for s in shares) <= 100
    for name, count in gpus.items():  # whole GPUs and shared GPUs together: never more than the node has
        opened = sum(1 for (n, _) in shared if n == name)
        assert whole[name] + opened <= count, (name, whole[name], opened)
        # a device index names one of the node's GPUs
        assert all(d < count for (n, d) in shared if n == name)
    assert opened_before <= set(shared)


@SETTINGS
@given(mixed())
def test_without_fractions_the_decisions_are_those_of_before(snap):
    """A queue with no fractions decides as it did: running fractions (of a department with nothing queued)
    hold their shared GPUs as whole-GPU jobs would, one each, and the queue's decisions are those of a cluster
    where such jobs hold those GPUs with no end in sight (a head never counts on a shared GPU coming free:
    fractions may join it whatever the reservations)."""
    shared = {(r.placement[0], r.devices[0]) for r in snap.running if r.share is not None}
    whole_running = tuple(r for r in snap.running if r.share is None)
    stand_ins = tuple(RunningJob(10_000 + k, "C", "a100", "realtime", (name,), 1, NOW - 7200,
                                 max_runtime_s=NEVER)
                      for k, (name, _) in enumerate(sorted(shared)))
    pending = tuple(j for j in snap.pending if j.share is None)
    plain = replace(snap, running=whole_running + stand_ins, pending=pending)
    a = schedule(plain)
    b = schedule(replace(snap, pending=pending))
    assert [(x.job_id, x.placement) for x in a.admissions] == [(x.job_id, x.placement) for x in b.admissions]
    # The same jobs wait; a reason may differ: there a head reserves for an instant that never comes (the jobs
    # after it say they wait for it), here it holds no reservation (they say what they lack themselves).
    assert [x.job_id for x in a.pending] == [x.job_id for x in b.pending]


@SETTINGS
@given(mixed())
def test_a_fraction_is_a_victim_only_alone_on_its_gpu(snap):
    # the mixed snapshots' running fractions made evictable (elastic): a realtime arrival may take them, but
    # only where the fraction is the one holder of every GPU it sits on
    running = tuple(replace(r, tier="elastic") if r.share is not None else r for r in snap.running)
    result = schedule(replace(snap, running=running))
    holders: dict[tuple[str, int], set[int]] = defaultdict(set)
    for r in running:
        if r.share is not None:
            for name, d in zip(r.placement, r.devices, strict=True):
                holders[(name, d)].add(r.id)
    victims = {v for p in result.preemptions for v in p.victim_ids}
    for r in running:
        if r.id in victims and r.share is not None:
            assert all(holders[(name, d)] == {r.id} for name, d in zip(r.placement, r.devices, strict=True))
