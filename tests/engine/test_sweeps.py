"""Sweeps in the pure core: held jobs, dependencies (met, waiting, never satisfiable) and array throttles, as
table tests and Hypothesis properties; the array and dependency syntaxes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_builders import NOW, Result, Snap, job, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import reasons, schedule
from engine.arrayspec import ArraySpecError, parse_array, placeholder_problems, substitute
from engine.sweeps import dependency_status, parse_after
from engine.types import Dependency

OK, ANY, NOT_OK = "afterok", "afterany", "afternotok"


def dep(condition, *ids, label="job"):
    return Dependency(condition, tuple(ids), label)


@pytest.mark.parametrize(("condition", "ended", "status"), [
    (OK, {}, "waiting"),
    (OK, {1: "succeeded"}, "waiting"),  # job 2 still runs
    (OK, {1: "succeeded", 2: "succeeded"}, "met"),
    (OK, {1: "failed"}, "never"),  # no need to wait for job 2
    (OK, {1: "cancelled", 2: "succeeded"}, "never"),
    (ANY, {1: "failed"}, "waiting"),
    (ANY, {1: "failed", 2: "cancelled"}, "met"),
    (NOT_OK, {1: "failed"}, "waiting"),
    (NOT_OK, {1: "failed", 2: "succeeded"}, "met"),
    (NOT_OK, {1: "succeeded", 2: "succeeded"}, "never"),
    (NOT_OK, {1: "cancelled", 2: "succeeded"}, "met"),
])
def test_dependency_status(condition, ended, status):
    assert dependency_status(dep(condition, 1, 2), ended) == status


def decide(*pending, running=(), ended=None, gpus=8, nodes=1):
    snap = Snap().nodes(nodes, gpus=gpus).quota("A", 64).running(*running).pending(*pending).build()
    return Result(schedule(replace(snap, ended=ended or {})))


def test_a_held_job_is_not_admitted_and_has_no_estimate_and_the_next_one_goes():
    r = decide(job(1, held=True, submitted_at=NOW - 100), job(2))
    assert r.code(1) == reasons.HELD and r.reason[1].estimated_start is None
    assert r.code(2) == "admitted"


def test_a_job_waits_for_its_dependency_and_its_estimate_counts_the_dependencys_end():
    r = decide(job(2, after=(dep(OK, 1, label="job 1"),)), running=[run(1, ran=600, max_runtime_s=3600)])
    why = r.reason[2]
    assert why.code == reasons.WAITING_FOR_DEPENDENCY and why.detail["dependency"] == "job 1"
    assert why.estimated_start == NOW - 600 + 3600  # when job 1 is due to end, though GPUs are free now


def test_a_chain_of_pending_dependencies_adds_their_runtimes():
    r = decide(job(1, max_runtime_s=1000), job(2, max_runtime_s=500, after=(dep(OK, 1),)),
               job(3, after=(dep(ANY, 2),)), gpus=1)
    assert r.code(1) == "admitted"
    assert r.reason[2].estimated_start == NOW + 1000 and r.reason[3].estimated_start == NOW + 1500


def test_a_dependency_on_a_job_the_snapshot_does_not_know_has_no_estimate():
    r = decide(job(2, after=(dep(OK, 99),)))  # job 99 awaits approval, say
    assert r.code(2) == reasons.WAITING_FOR_DEPENDENCY and r.reason[2].estimated_start is None


@pytest.mark.parametrize(("condition", "outcome", "code"), [
    (OK, "succeeded", "admitted"), (OK, "failed", reasons.DEPENDENCY_NEVER_SATISFIED),
    (ANY, "cancelled", "admitted"), (NOT_OK, "failed", "admitted"),
    (NOT_OK, "succeeded", reasons.DEPENDENCY_NEVER_SATISFIED),
])
def test_an_ended_dependency_opens_the_gate_or_closes_it_for_good(condition, outcome, code):
    r = decide(job(2, after=(dep(condition, 1),)), ended={1: outcome})
    assert r.code(2) == code
    if code != "admitted":
        assert r.reason[2].estimated_start is None


def test_every_dependency_must_be_met():
    r = decide(job(3, after=(dep(OK, 1), dep(ANY, 2, label="job 2"))), ended={1: "succeeded"})
    assert r.code(3) == reasons.WAITING_FOR_DEPENDENCY and r.reason[3].detail["dependency"] == "job 2"


def test_the_throttle_counts_running_tasks_and_this_cycles_admissions():
    tasks = [job(i, array_id=7, array_throttle=3, submitted_at=NOW - i) for i in range(1, 7)]
    r = decide(*tasks, running=[run(100, array_id=7)], gpus=8)
    assert sorted(r.admitted) == [5, 6]  # the two oldest; one task of the array already runs
    for i in (1, 2, 3, 4):
        assert r.code(i) == reasons.ARRAY_THROTTLED and r.reason[i].detail["active"] == 3
        assert r.reason[i].estimated_start is not None and r.reason[i].estimated_start >= NOW


def test_a_throttled_tasks_estimate_waits_for_a_task_of_its_array_to_end():
    tasks = [job(i, array_id=7, array_throttle=1, max_runtime_s=1000, submitted_at=NOW - 10 + i) for i in (1, 2, 3)]
    r = decide(*tasks, gpus=8)
    assert list(r.admitted) == [1]
    assert (r.reason[2].estimated_start, r.reason[3].estimated_start) == (NOW + 1000, NOW + 2000)


def test_another_arrays_tasks_and_plain_jobs_are_not_throttled():
    r = decide(job(1, array_id=7, array_throttle=1), job(2, array_id=8, array_throttle=1), job(3),
               running=[run(100, array_id=7)])
    assert r.code(1) == reasons.ARRAY_THROTTLED and r.code(2) == "admitted" and r.code(3) == "admitted"


# ------------------------------------------------------------------ properties


@st.composite
def sweep_snapshots(draw):
    """A small cluster, running tasks of two throttled arrays, and pending tasks, plain jobs and dependants."""
    gpus = draw(st.sampled_from([2, 4, 8]))
    throttles = {7: draw(st.integers(1, 4)), 8: draw(st.integers(1, 4))}
    running, used = [], 0
    for i in range(draw(st.integers(0, 4))):
        array = draw(st.sampled_from([7, 8, None]))
        if used + 1 > gpus or (array and sum(r.array_id == array for r in running) >= throttles[array]):
            continue
        running.append(run(100 + i, on=("n0",), array_id=array, ran=draw(st.sampled_from([60, 600]))))
        used += 1
    ended = {i: draw(st.sampled_from(["succeeded", "failed", "cancelled"])) for i in range(200, 204)
             if draw(st.booleans())}
    known = [*[r.id for r in running], 200, 201, 202, 203]
    pending = []
    for i in range(1, draw(st.integers(1, 12)) + 1):
        array = draw(st.sampled_from([7, 8, None, None]))
        after = tuple(dep(draw(st.sampled_from([OK, ANY, NOT_OK])), *draw(st.lists(st.sampled_from(known), min_size=1,
                                                                                    max_size=3, unique=True)))
                      for _ in range(draw(st.integers(0, 2))))
        pending.append(job(i, gpus=draw(st.sampled_from([1, 2])), array_id=array,
                           array_throttle=throttles[array] if array else None, after=after,
                           held=draw(st.integers(0, 5)) == 0, submitted_at=NOW - draw(st.integers(0, 5000)),
                           tier=draw(st.sampled_from(["elastic", "backfill", "realtime"]))))
    snap = Snap().node("n0", gpus=gpus).quota("A", 64).running(*running).pending(*pending).build()
    return replace(snap, ended=ended), throttles


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(sweep_snapshots())
def test_an_array_never_has_more_than_its_throttle_admitted_or_running(case):
    snapshot, throttles = case
    result = schedule(snapshot)
    pending = {j.id: j for j in snapshot.pending}
    for array, k in throttles.items():
        active = sum(r.array_id == array for r in snapshot.running)
        active += sum(pending[a.job_id].array_id == array for a in result.admissions)
        assert active <= k


@SETTINGS
@given(sweep_snapshots())
def test_a_job_never_starts_before_its_after_success_dependency_succeeded_nor_while_held(case):
    snapshot, _ = case
    result = schedule(snapshot)
    pending = {j.id: j for j in snapshot.pending}
    for a in result.admissions:
        job_ = pending[a.job_id]
        assert not job_.held
        for d in job_.after:
            if d.condition == OK:
                assert all(snapshot.ended.get(i) == "succeeded" for i in d.job_ids)
            else:
                assert all(i in snapshot.ended for i in d.job_ids)
    for p in result.pending:
        if p.code == reasons.WAITING_FOR_DEPENDENCY and p.estimated_start is not None:
            assert p.estimated_start >= snapshot.now


# ------------------------------------------------------------------ syntax


@pytest.mark.parametrize(("text", "indices", "throttle"), [
    ("0-3", (0, 1, 2, 3), None), ("0-63%8", tuple(range(64)), 8), ("1,3,5", (1, 3, 5), None),
    ("0-30:10", (0, 10, 20, 30), None), (" 7 ", (7,), None), ("9,0-2%1", (0, 1, 2, 9), 1),
])
def test_array_syntax(text, indices, throttle):
    spec = parse_array(text, max_tasks=1000)
    assert (spec.indices, spec.throttle, spec.count) == (indices, throttle, len(indices))


@pytest.mark.parametrize("text", ["", "a", "3-1", "0-4:0", "1,1", "0-3%0", "0-3%", "0-3%-1", "-1", "0-1001",
                                  "0-9999999", "1;2", "0-3,2"])
def test_bad_array_syntax_says_what_to_write(text):
    with pytest.raises(ArraySpecError):
        parse_array(text, max_tasks=1000)


@pytest.mark.parametrize(("text", "says"), [
    ("0-9%2147483648", "at most 1000"),  # past the 32-bit column the throttle is stored in
    ("0-9%1001", "at most 1000"),
    ("0-9%" + "9" * 5000, "at most 1000"),  # longer than int() reads at all
    ("0-9%\u00b2", "whole number"),  # superscript two: str.isdigit() says yes, int() says no
    ("0-9%\u0663", "whole number"),  # Arabic-Indic three: int() reads it, but it is not what anyone types
    ("\u0663", "not an index"),
    ("0-\uff19", "not an index"),  # fullwidth nine
    ("0-" + "9" * 5000, "up to 1000000"),
    ("0-2147483648", "up to 1000000"),
    ("99999999999999999999-99999999999999999999", "up to 1000000"),
    ("0-1000000", "At most 1000 tasks"),
    ("0-10:" + "9" * 5000, "step must be from 1 to 1000000"),
])
def test_every_number_of_an_array_is_bounded_ascii_digits(text, says):
    with pytest.raises(ArraySpecError, match=says):
        parse_array(text, max_tasks=1000)


def test_leading_zeros_and_spaces_around_the_throttle_are_still_numbers():
    assert parse_array("0007-0009% 2", max_tasks=1000) == parse_array("7-9%2", max_tasks=1000)


@pytest.mark.parametrize(("text", "problems"), [
    ("--seed={{index}}", 0), ("{{ count }}", 0), ("plain {text}", 0), ("{{idx}}", 1), ("{{index", 1),
    ("{{ index }} {{x}}", 1), ("{{}}", 1),
])
def test_placeholders(text, problems):
    assert len(placeholder_problems(text)) == problems


def test_substitution():
    assert substitute("lr-{{index}}-of-{{ count }}", index=3, count=8) == "lr-3-of-8"


def test_after_syntax():
    assert parse_after("afterok:12:13, afterany:a7") == [
        {"condition": OK, "job": 12}, {"condition": OK, "job": 13}, {"condition": ANY, "array": 7}]
    for bad in ("afterwards:1", "afterok", "afterok:x", "afterok:a"):
        with pytest.raises(ValueError):
            parse_after(bad)
