"""Table-driven tests of data sources as a dispatch constraint: a job goes only to a cluster that has every
source it mounts, and pends with ``data_source_unavailable`` naming what is missing where when none has."""

from __future__ import annotations

import pytest
from core_builders import Snap, job, run

from engine import reasons
from engine.explain import NO_ESTIMATE


def two_clusters() -> Snap:
    return Snap().node("n0", gpus=8, cluster="east").node("n0", gpus=8, cluster="west").quota("A", 16)


@pytest.mark.parametrize(
    ("sources", "kw", "running", "expected"),
    [
        # no sources: any cluster (best fit, then the name)
        ((), {}, (), "east"),
        # the only cluster with the dataset, even when the other one is the better fit
        ((("imagenet", ("west",)),), {}, (run(9, on="n0", cluster="east", gpus=2),), "west"),
        # every source must be there: the one cluster that has both
        ((("imagenet", ("east", "west")), ("scratch", ("east",))), {}, (), "east"),
        # sources and selector together
        ((("imagenet", ("east", "west")),), {"cluster_selector": (("zone", "b"),)}, (), "west"),
    ],
)
def test_a_job_goes_only_where_all_its_sources_are(sources, kw, running, expected):
    snap = two_clusters().cluster("west", zone="b").cluster("east", zone="a")
    res = snap.running(*running).pending(job(1, gpus=4, data_sources=sources, **kw)).decide()
    assert res.admitted[1].cluster == expected


@pytest.mark.parametrize(
    ("sources", "kw", "code", "missing"),
    [
        # a source on no cluster at all
        ((("imagenet", ()),), {}, reasons.DATA_SOURCE_UNAVAILABLE, {"east": ["imagenet"], "west": ["imagenet"]}),
        # each source somewhere, but never together
        ((("imagenet", ("east",)), ("scratch", ("west",))), {}, reasons.DATA_SOURCE_UNAVAILABLE,
         {"east": ["scratch"], "west": ["imagenet"]}),
        # the only cluster with the source is not one the selector allows: only allowed clusters are named
        ((("imagenet", ("east",)),), {"cluster_selector": (("zone", "b"),)}, reasons.DATA_SOURCE_UNAVAILABLE,
         {"west": ["imagenet"]}),
        # a selector that matches no cluster stays the reason (it is the more basic one)
        ((("imagenet", ("east",)),), {"cluster_selector": (("zone", "c"),)}, reasons.NO_MATCHING_CLUSTER, None),
    ],
)
def test_a_job_whose_sources_no_cluster_has_waits_and_says_which(sources, kw, code, missing):
    snap = two_clusters().cluster("west", zone="b").cluster("east", zone="a")
    res = snap.pending(job(1, gpus=1, data_sources=sources, **kw)).decide()
    reason = res.reason[1]
    assert reason.code == code
    if missing is not None:
        assert reason.detail["missing"] == missing
        assert reason.estimated_start is None and code in NO_ESTIMATE
        for cluster, names in missing.items():
            assert f"{cluster} lacks {', '.join(names)}" in reason.message


def test_a_job_with_missing_sources_does_not_block_the_next_one():
    snap = two_clusters().pending(job(1, gpus=8, data_sources=(("imagenet", ()),)), job(2, gpus=8))
    res = snap.decide()
    assert res.code(1) == reasons.DATA_SOURCE_UNAVAILABLE and res.code(2) == "admitted"
