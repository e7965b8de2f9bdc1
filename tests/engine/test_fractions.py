"""Fractional GPUs in the engine: shares of one GPU placed per device, packed before a GPU is opened, never
oversubscribed, and a shared GPU never given whole."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from core_builders import NOW, Snap, job, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import schedule
from engine.cycle import Cycle
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


def quarter(id: int, device: int = 0, dept: str = "B", ran: float = 2 * HOUR, **kw) -> RunningJob:
    """A running quarter of an A100 on n0's shared GPU ``device``."""
    kw.setdefault("max_runtime_s", 9 * HOUR)
    return run(id, dept=dept, on="n0", gpus=1, share=hami(10), devices=(device,), ran=ran, **kw)


def test_fractions_sharing_a_gpu_leave_together_for_a_whole_gpu_job():
    # one GPU shared by two of B's quarters and nothing else to take: evicting one would free nothing, so the
    # realtime job evicts both together, in one preemption, and waits for them in the words of any eviction
    r = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1)
         .running(quarter(1), quarter(2))
         .pending(job(3, tier="realtime")).decide())
    assert [p.victim_ids for p in r.raw.preemptions] == [(1, 2)]
    assert r.raw.preemptions[0].preemptor_id == 3 and r.raw.preemptions[0].reason == "priority"
    assert r.code(3) == "preemption_in_progress" and r.reason[3].detail["victims"] == [1, 2]
    alone = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1).running(quarter(1))
             .pending(job(3, tier="realtime")).decide())
    assert r.reason[3].message == alone.reason[3].message.replace("1 job(s)", "2 job(s)")


def test_the_group_loses_its_members_work_together_in_the_order():
    # B's whole-GPU job and two quarters sharing the other GPU, all two hours in: the quarters lose half a
    # GPU's work together, less than the whole job's, so they go
    r = (Snap().nodes(1, gpus=2).quota("A", 2).quota("B", 2)
         .running(run(1, dept="B", on="n0", gpus=1, ran=2 * HOUR, max_runtime_s=9 * HOUR),
                  quarter(2, device=1), quarter(4, device=1))
         .pending(job(3, tier="realtime")).decide())
    assert r.victims == {2, 4}
    # four quarters that ran three hours lose three GPU-hours together, the whole job two: it goes instead
    r = (Snap().nodes(1, gpus=2).quota("A", 2).quota("B", 2)
         .running(run(1, dept="B", on="n0", gpus=1, ran=2 * HOUR, max_runtime_s=9 * HOUR),
                  *(quarter(i, device=1, ran=3 * HOUR) for i in (2, 4, 5, 6)))
         .pending(job(3, tier="realtime")).decide())
    assert r.victims == {1}


def test_a_group_sits_where_its_most_protected_member_would():
    # the candidates in their total order: borrowers first, then lower tiers, then the work lost. The group of
    # a borrowed backfill quarter and an elastic one that does not borrow sits with non-borrowing elastic work,
    # and loses their two shares' work: half a GPU for two hours, one GPU-hour (the lone elastic job, two)
    snap = (Snap().nodes(1, gpus=4).quota("A", 4).quota("B", 4)
            .running(run(1, dept="B", on="n0", gpus=1, ran=5 * HOUR, max_runtime_s=9 * HOUR, borrowed=True),
                     run(5, dept="B", on="n0", gpus=1, ran=2 * HOUR, max_runtime_s=9 * HOUR),
                     run(6, dept="B", on="n0", gpus=1, ran=0.5 * HOUR, max_runtime_s=9 * HOUR, tier="backfill"),
                     quarter(2, device=1, borrowed=True, tier="backfill"), quarter(4, device=1))
            .build())
    cands = Cycle(snap).evictions.cands[("default", "a100")]
    assert [tuple(m.id for m in c.members) for c in cands] == [(1,), (6,), (2, 4), (5,)]
    group = cands[2]
    assert group.job is None and group.key[:3] == (1, -1, 0.5 * 2 * HOUR) and group.gpus == 1 and group.h == 1
    assert group.gone == {"B": 500}


def test_one_protected_member_keeps_the_whole_group():
    # the same GPU shared with a realtime session, or with a job that chose not to be preempted: nothing goes
    for other in (quarter(2, tier="realtime"), quarter(2, own_preemptible=False), quarter(2, preemptible=False)):
        r = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1).running(quarter(1), other)
             .pending(job(3, tier="realtime")).decide())
        assert not r.raw.preemptions and r.code(3) != "preemption_in_progress", other


def test_each_member_keeps_the_cooldown_its_budgets_and_counts_in_the_window():
    base = Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1)
    # one member started 5 minutes ago: the group waits for its cooldown, and the reason says when
    r = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1).running(quarter(1), quarter(2, ran=300.0))
         .pending(job(3, tier="realtime")).decide())
    assert not r.victims and r.code(3) == "preemption_cooldown"
    assert r.reason[3].detail["victims_needed"] == 2
    assert r.reason[3].detail["preemptible_at"] == NOW - 300.0 + r.raw.figures.get("min_runtime_s", 600.0)
    # one member's budget has room for one pod, and both are covered by it: neither goes
    r = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1).budget("lab", 1)
         .running(quarter(1, disruption_budgets=("lab",)), quarter(2, disruption_budgets=("lab",)))
         .pending(job(3, tier="realtime")).decide())
    assert not r.victims and r.code(3) == "disruption_budget" and r.reason[3].detail["budgets"] == ["lab"]
    # room for both: they go, and the budget is charged a pod each
    r = (Snap().nodes(1, gpus=1).quota("A", 1).quota("B", 1).budget("lab", 2)
         .running(quarter(1, disruption_budgets=("lab",)), quarter(2, disruption_budgets=("lab",)))
         .pending(job(3, tier="realtime")).decide())
    assert r.victims == {1, 2}
    # the window has room for one more eviction: the group needs two
    r = base.running(quarter(1), quarter(2)).recent_preemptions(9).pending(job(3, tier="realtime")).decide()
    assert not r.victims and r.code(3) == "preemption_rate_limit"
    assert r.reason[3].detail["victims_needed"] == 2 and r.reason[3].detail["allowed_now"] == 1


def test_a_job_with_fractions_on_two_gpus_links_their_groups():
    # job 1's two quarters sit on both GPUs of n0, job 2's beside one of them: freeing both GPUs for a 2-GPU
    # realtime job takes all three together; with job 2 a realtime session, none of them goes
    two = dict(dept="B", on=("n0", "n0"), gpus=1, share=hami(10), devices=(0, 1), ran=2 * HOUR, max_runtime_s=9 * HOUR)
    r = (Snap().nodes(1, gpus=2).quota("A", 2).quota("B", 2)
         .running(run(1, **two), quarter(2, device=1))
         .pending(job(3, gpus=2, tier="realtime")).decide())
    assert [p.victim_ids for p in r.raw.preemptions] == [(1, 2)]
    r = (Snap().nodes(1, gpus=2).quota("A", 2).quota("B", 2)
         .running(run(1, **two), quarter(2, device=1, tier="realtime"))
         .pending(job(3, gpus=1, tier="realtime")).decide())
    assert not r.raw.preemptions


def test_a_lender_reclaims_a_gpu_its_borrowers_share():
    # A lent its nominal GPU: B holds its own whole GPU and borrows A's as two quarters. A's job, patient past
    # the reclaim delay, takes it back by evicting both (the GPUs they free, one, are not too many for it)
    r = (Snap().nodes(1, gpus=2).quota("A", 1).quota("B", 1)
         .running(run(1, dept="B", on="n0", gpus=1, ran=2 * HOUR, max_runtime_s=9 * HOUR),
                  quarter(2, device=1, borrowed=True), quarter(4, device=1, borrowed=True))
         .pending(job(3, submitted_at=NOW - HOUR)).decide())
    assert [(p.victim_ids, p.reason) for p in r.raw.preemptions] == [((2, 4), "reclaim")]


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
    assert_never_oversubscribed(snap, schedule(snap))


def assert_never_oversubscribed(snap, result):
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
def test_fractions_are_victims_only_with_every_fraction_on_their_gpus(snap):
    # the mixed snapshots' running fractions made evictable (elastic) on every shared GPU of even index, and on
    # the others those of even id, the rest left realtime (sessions): a realtime arrival may take fractions, but
    # a realtime one never, and a fraction only with every other fraction on each GPU it holds (the GPU is freed
    # whole or not touched); the admissions stay within every GPU's memory and compute
    running = tuple(replace(r, tier="elastic") if r.share is not None and (r.devices[0] % 2 == 0 or r.id % 2 == 0)
                    else r for r in snap.running)
    snap = replace(snap, running=running)
    result = schedule(snap)
    assert_never_oversubscribed(snap, result)
    holders: dict[tuple[str, int], set[int]] = defaultdict(set)
    for r in running:
        if r.share is not None:
            for name, d in zip(r.placement, r.devices, strict=True):
                holders[(name, d)].add(r.id)
    victims = {v for p in result.preemptions for v in p.victim_ids}
    by_id = {r.id: r for r in running}
    for v in victims:
        r = by_id[v]
        assert r.tier != "realtime"
        if r.share is not None:
            assert all(holders[(name, d)] <= victims for name, d in zip(r.placement, r.devices, strict=True))
