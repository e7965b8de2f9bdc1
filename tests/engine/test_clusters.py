"""Table-driven tests of dispatch across several clusters: which cluster a job starts on (selector, preference,
cost, fit), clusters closed to admissions, global and per-cluster quotas, and reasons and estimates that span
clusters."""

from __future__ import annotations

import pytest
from core_builders import NOW, Snap, job, run

from engine import reasons

HOUR = 3600.0


def two_clusters(east_gpus: int = 8, west_gpus: int = 8) -> Snap:
    """Two clusters of one 8-GPU node each (the node names repeat, as they may on real clusters)."""
    return (
        Snap()
        .node("n0", gpus=east_gpus, cluster="east")
        .node("n0", gpus=west_gpus, cluster="west")
        .quota("A", 16)
        .quota("B", 16)
    )


# ---------------------------------------------------------------- which cluster a job starts on


@pytest.mark.parametrize(
    ("clusters", "kw", "running", "expected"),
    [
        # nothing said: best fit (the fuller pool), then the name
        ((), {}, (), "east"),
        ((), {}, (run(9, on="n0", cluster="west", gpus=2),), "west"),
        # the cheaper cluster wins over best fit
        ((("east", 1, {}), ("west", 0, {})), {}, (), "west"),
        ((("east", 0, {}), ("west", 1, {})), {}, (run(9, on="n0", cluster="west", gpus=2),), "east"),
        # a preferred label wins over cost; more matches win over fewer
        ((("east", 0, {}), ("west", 1, {"region": "eu"})), {"cluster_preference": (("region", "eu"),)}, (), "west"),
        (
            (("east", 0, {"region": "eu"}), ("west", 0, {"region": "eu", "data": "imagenet"})),
            {"cluster_preference": (("data", "imagenet"), ("region", "eu"))},
            (),
            "west",
        ),
        # a preference no cluster has changes nothing
        ((("east", 1, {}), ("west", 0, {})), {"cluster_preference": (("region", "us"),)}, (), "west"),
        # a selector restricts, even to the dearer and emptier cluster
        ((("east", 5, {"data": "imagenet"}), ("west", 0, {})), {"cluster_selector": (("data", "imagenet"),)},
         (run(9, on="n0", cluster="west", gpus=2),), "east"),  # fmt: skip
        # every label of the selector must match
        (
            (("east", 0, {"data": "imagenet"}), ("west", 0, {"data": "imagenet", "region": "eu"})),
            {"cluster_selector": (("data", "imagenet"), ("region", "eu"))},
            (),
            "west",
        ),
        # an unlisted cluster is active, unlabelled, of cost rank 0
        ((("east", 3, {}),), {}, (), "west"),
    ],
)
def test_dispatch_chooses_the_cluster(clusters, kw, running, expected):
    snap = two_clusters()
    for name, cost, labels in clusters:
        snap.cluster(name, cost_rank=cost, **labels)
    res = snap.running(*running).pending(job(1, gpus=4, **kw)).decide()
    assert res.admitted[1].cluster == expected


def test_a_job_that_fits_only_one_cluster_goes_there_whatever_the_preference():
    snap = two_clusters(east_gpus=8, west_gpus=2).cluster("west", cost_rank=0, region="eu").cluster("east", cost_rank=9)
    res = snap.pending(job(1, gpus=4, cluster_preference=(("region", "eu"),))).decide()
    assert res.admitted[1].cluster == "east"


def test_dispatch_is_independent_of_input_order():
    snap = two_clusters().cluster("west", cost_rank=1).cluster("east", cost_rank=1)
    snap.pending(*(job(i, gpus=2) for i in range(1, 7)))
    a = snap.build()
    b = type(a)(**{**{f: getattr(a, f) for f in a.__dataclass_fields__},
                   "nodes": a.nodes[::-1], "pending": a.pending[::-1], "clusters": a.clusters[::-1]})  # fmt: skip
    from engine import schedule

    assert schedule(a) == schedule(b)


# ---------------------------------------------------------------- clusters closed to admissions


@pytest.mark.parametrize("state", ["cordoned", "draining"])
def test_no_admission_on_a_closed_cluster_the_other_takes_the_job(state):
    res = two_clusters().cluster("east", state=state).pending(job(1, gpus=4)).decide()
    assert res.admitted[1].cluster == "west"


@pytest.mark.parametrize("state", ["cordoned", "draining"])
def test_every_matching_cluster_closed_waits_and_names_them(state):
    snap = two_clusters().cluster("east", state=state, data="imagenet").cluster("west")
    res = snap.pending(job(1, gpus=4, cluster_selector=(("data", "imagenet"),))).decide()
    r = res.reason[1]
    assert r.code == reasons.CLUSTERS_UNAVAILABLE
    assert r.detail[reasons.DETAIL_UNAVAILABLE] == {"east": state}
    assert "east" in r.message and r.estimated_start is None


def test_a_pinned_job_on_a_draining_cluster_waits():
    res = two_clusters().cluster("east", state="draining").pending(job(1, cluster="east")).decide()
    assert res.code(1) == reasons.CLUSTERS_UNAVAILABLE


def test_running_work_on_a_draining_cluster_keeps_running_and_is_no_reason_to_reserve_there():
    # east is draining and full; west is full until later: the head reserves west, east's job is left alone
    snap = (
        two_clusters().cluster("east", state="draining")
        .running(run(10, on="n0", cluster="east", gpus=8, ran=HOUR, max_runtime_s=2 * HOUR, tier="backfill"),
                 run(11, on="n0", cluster="west", gpus=8, ran=0, max_runtime_s=3 * HOUR, tier="backfill"))
        .pending(job(1, gpus=8, tier="realtime"), job(2, gpus=8))
    )  # fmt: skip
    res = snap.decide()
    assert 10 not in res.victims  # a realtime job does not preempt on a cluster it may not start on
    assert not res.admitted
    r2 = res.reason[2]
    assert r2.detail.get("cluster") in (None, "west")
    assert r2.detail[reasons.DETAIL_UNAVAILABLE] == {"east": "draining"}


def test_a_requeued_job_moves_to_another_cluster():
    # attempt 2 of a job that ran on east, now draining
    snap = two_clusters().cluster("east", state="draining").running(run(10, on="n0", cluster="east", gpus=8))
    res = snap.pending(job(1, gpus=8, attempt=2)).decide()
    assert res.admitted[1].cluster == "west"


def test_no_cluster_matches_the_selector():
    snap = two_clusters().cluster("east", data="coco").cluster("west", data="coco")
    res = snap.pending(job(1, cluster_selector=(("data", "imagenet"),))).decide()
    r = res.reason[1]
    assert r.code == reasons.NO_MATCHING_CLUSTER
    assert r.detail[reasons.DETAIL_SELECTOR] == {"data": "imagenet"}
    assert r.detail["clusters"] == ["east", "west"]
    assert r.estimated_start is None


def test_a_selector_on_unlisted_clusters_matches_nothing():
    res = two_clusters().pending(job(1, cluster_selector=(("region", "eu"),))).decide()
    assert res.code(1) == reasons.NO_MATCHING_CLUSTER


def test_a_matching_cluster_without_the_flavor_is_no_matching_cluster_not_unknown_flavor():
    # h100 exists (on west); the selector allows only east, which has none: the selector is what to change.
    snap = two_clusters().cluster("east", region="eu").node("h0", flavor="h100", cluster="west").quota("A", 8, "h100")
    res = snap.pending(job(1, flavor="h100", cluster_selector=(("region", "eu"),))).decide()
    assert res.code(1) == reasons.NO_MATCHING_CLUSTER
    assert res.reason[1].detail["flavor"] == "h100" and res.reason[1].detail["clusters"] == ["west"]
    assert "offers h100" in res.reason[1].message
    # a flavor no cluster has is still unknown
    res = snap.pending(job(2, flavor="b200", cluster_selector=(("region", "eu"),))).decide()
    assert res.code(2) == reasons.UNKNOWN_FLAVOR


# ---------------------------------------------------------------- global and per-cluster quotas


@pytest.mark.parametrize(
    ("quotas", "running", "gpus", "expected"),
    [
        # a global quota counts use on every cluster: 3 in use on east, nominal 4, no borrowing
        ([("A", 4, 0, None)], [("east", 3)], 2, reasons.QUOTA_EXHAUSTED),
        ([("A", 4, 0, None)], [("east", 3)], 1, "admitted"),
        # a per-cluster quota counts only its cluster: east is full for A, west has room
        ([("A", 3, 0, "east"), ("A", 4, 0, "west")], [("east", 3)], 2, "west"),
        # no row for a cluster: the department cannot use it
        ([("A", 3, 0, "east")], [("east", 3)], 1, reasons.QUOTA_EXHAUSTED),
        # a global quota caps the sum even where a per-cluster one has room
        ([("A", 4, 0, None), ("A", 8, 0, "west")], [("east", 3)], 2, reasons.QUOTA_EXHAUSTED),
        # ... and a per-cluster one caps the department's share of that cluster inside its global quota
        # (a cluster without a row of its own is limited by the global quota alone)
        ([("A", 4, 0, None), ("A", 1, 0, "west")], [("east", 2)], 2, "east"),
        ([("A", 4, 0, None), ("A", 2, 0, "east"), ("A", 4, 0, "west")], [("east", 2)], 2, "west"),
        ([("A", 4, 0, None), ("A", 2, 0, "east"), ("A", 1, 0, "west")], [("east", 2)], 2, reasons.QUOTA_EXHAUSTED),
    ],
)
def test_global_and_per_cluster_quotas(quotas, running, gpus, expected):
    snap = Snap().node("n0", cluster="east").node("n0", cluster="west").cluster("east").cluster("west", cost_rank=1)
    for dept, nominal, borrow, cluster in quotas:
        snap.quota(dept, nominal, borrow=borrow, cluster=cluster)
    snap.running(*(run(100 + i, on="n0", cluster=c, gpus=g) for i, (c, g) in enumerate(running)))
    res = snap.pending(job(1, gpus=gpus)).decide()
    if expected in ("east", "west"):
        assert res.admitted[1].cluster == expected
    else:
        assert res.code(1) == expected


def test_per_cluster_quota_detail_names_the_cluster():
    snap = Snap().node("n0", cluster="east").quota("A", 2, borrow=0, cluster="east")
    res = snap.running(run(10, on="n0", cluster="east", gpus=2)).pending(job(1)).decide()
    assert res.code(1) == reasons.QUOTA_EXHAUSTED
    assert res.reason[1].detail["quota_cluster"] == "east"


def test_per_cluster_borrowing_draws_only_on_the_same_clusters_lenders():
    # B lends 4 on west only; A's east quota is used up: A may borrow on west, not east
    snap = (
        Snap().node("n0", cluster="east").node("n0", cluster="west")
        .quota("A", 4, cluster="east").quota("A", 0, cluster="west").quota("B", 4, cluster="west")
        .running(run(10, on="n0", cluster="east", gpus=4))
    )  # fmt: skip
    res = snap.pending(job(1, gpus=4)).decide()
    assert res.admitted[1].cluster == "west" and res.admitted[1].borrowed
    # west lends only 4, east has nothing to lend (A's own nominal is in use): 5 never fit together
    res = Snap().node("n0", cluster="east").node("n0", cluster="west").quota("A", 4, cluster="east").quota(
        "A", 0, cluster="west").quota("B", 4, cluster="west").running(run(10, on="n0", cluster="east", gpus=4)).pending(
        job(2, gpus=5)).decide()  # fmt: skip
    assert res.code(2) == reasons.QUOTA_EXHAUSTED


def test_a_global_quota_borrows_across_clusters():
    # A's nominal 4 is used on east; B's idle nominal (global) lets A borrow on west
    snap = (
        Snap().node("n0", cluster="east", gpus=4).node("n0", cluster="west")
        .quota("A", 4).quota("B", 8)
        .running(run(10, on="n0", cluster="east", gpus=4))
    )  # fmt: skip
    res = snap.pending(job(1, gpus=4)).decide()
    assert res.admitted[1].cluster == "west" and res.admitted[1].borrowed


def test_reclaim_takes_victims_only_on_the_cluster_whose_quota_it_reclaims():
    # A's east quota (nominal 4) is lent to B, who runs 8 on east (borrowed) and a borrowed job on west.
    # A's job may only use east: the reclaim picks an east borrower, never the west one.
    snap = (
        Snap().node("n0", cluster="east").node("n0", cluster="west")
        .quota("A", 4, cluster="east").quota("B", 4, cluster="east").quota("B", 0, cluster="west")
        .quota("C", 8, cluster="west")
        .running(run(10, "B", on=("n0",) * 4, cluster="east", gpus=1, max_runtime_s=10 * HOUR),
                 run(11, "B", on="n0", cluster="east", gpus=4, borrowed=True, tier="backfill", ran=2 * HOUR,
                     max_runtime_s=10 * HOUR),
                 run(12, "B", on="n0", cluster="west", gpus=4, borrowed=True, tier="backfill", ran=2 * HOUR,
                     max_runtime_s=10 * HOUR))
        .pending(job(1, gpus=4, submitted_at=NOW - 2 * HOUR, max_runtime_s=HOUR))
    )  # fmt: skip
    res = snap.decide()
    assert res.victims == {11}
    assert res.reason[1].detail["cluster"] == "east"


# ---------------------------------------------------------------- reasons and estimates across clusters


def test_the_estimate_is_the_earliest_among_the_clusters_open_to_the_job():
    snap = (
        two_clusters()
        .running(run(10, on="n0", cluster="east", gpus=8, ran=0, max_runtime_s=2 * HOUR),
                 run(11, on="n0", cluster="west", gpus=8, ran=0, max_runtime_s=HOUR))
        .pending(job(1, gpus=8), job(2, gpus=8))
    )  # fmt: skip
    res = snap.decide()
    assert res.reason[1].estimated_start == NOW + HOUR  # the reserved head: west frees first
    assert res.reason[1].detail["cluster"] == "west"
    assert res.reason[2].estimated_start == NOW + 2 * HOUR  # then east


def test_the_estimate_skips_a_draining_cluster():
    snap = (
        two_clusters().cluster("west", state="draining")
        .running(run(10, on="n0", cluster="east", gpus=8, ran=0, max_runtime_s=2 * HOUR),
                 run(11, on="n0", cluster="west", gpus=8, ran=0, max_runtime_s=HOUR))
        .pending(job(1, gpus=8), job(2, gpus=8))
    )  # fmt: skip
    res = snap.decide()
    assert res.reason[1].estimated_start == NOW + 2 * HOUR
    assert res.reason[1].detail["cluster"] == "east"
    assert res.reason[2].estimated_start == NOW + 3 * HOUR  # after job 1 (an hour long), on east only


def test_the_estimate_honours_per_cluster_quotas():
    # east has free GPUs but A's east quota is used up until job 10 ends in an hour; west is full for 3 hours
    snap = (
        Snap().node("n0", cluster="east").node("n0", cluster="west")
        .quota("A", 2, borrow=0, cluster="east").quota("A", 8, cluster="west").quota("B", 8, cluster="west")
        .running(run(10, on="n0", cluster="east", gpus=2, ran=0, max_runtime_s=HOUR),
                 run(11, "B", on="n0", cluster="west", gpus=8, ran=0, max_runtime_s=3 * HOUR))
        .pending(job(1, gpus=2))
    )  # fmt: skip
    res = snap.decide()
    assert res.reason[1].estimated_start == NOW + HOUR
