"""Table-driven tests of the retry rules (which failures are retried, the back-off) and of the engine keeping a
retried attempt out of admission until its back-off has passed."""

from __future__ import annotations

import pytest
from core_builders import NOW, Result, Snap, job

from engine import reasons, schedule
from engine.retries import (
    EXIT_CODE,
    IMAGE,
    OOM,
    OTHER,
    PLATFORM,
    FailedPod,
    backoff_s,
    decide,
)


@pytest.mark.parametrize(
    ("pod", "max_retries", "codes", "done", "retry", "cause"),
    [
        # an exit code the job lists is retried while retries are left
        (FailedPod(1, "Error", 3), 2, (3,), 0, True, EXIT_CODE),
        (FailedPod(1, "Error", 3), 2, (3,), 1, True, EXIT_CODE),
        (FailedPod(1, "Error", 3), 2, (3,), 2, False, EXIT_CODE),
        # an exit code it does not list is the user's: never retried
        (FailedPod(1, "Error", 1), 5, (3,), 0, False, EXIT_CODE),
        (FailedPod(0, "Error", 1), 5, (), 0, False, EXIT_CODE),
        # out of memory only when 137 is asked for
        (FailedPod(0, "OOMKilled", 137), 5, (), 0, False, OOM),
        (FailedPod(0, "OOMKilled", 137), 5, (137,), 0, True, OOM),
        # the platform's faults are retried even when the job asks for no retries, up to the platform default
        (FailedPod(0, "Evicted"), 0, (), 0, True, PLATFORM),
        (FailedPod(0, "NodeLost"), 0, (), 2, True, PLATFORM),
        (FailedPod(0, "NodeLost"), 0, (), 3, False, PLATFORM),
        (FailedPod(0, "NodeLost"), 5, (), 4, True, PLATFORM),
        (FailedPod(0, "ErrImagePull", None, "rpc error: dial tcp 10.0.0.1:443: i/o timeout"), 0, (), 0, True,
         PLATFORM),
        (FailedPod(0, "ImagePullBackOff", None, "received unexpected HTTP status: 503 Service Unavailable"), 0, (),
         0, True, PLATFORM),
        # a bad image is the user's
        (FailedPod(0, "ImagePullBackOff", None, 'manifest for busybox:nope not found: manifest unknown'), 5, (1,),
         0, False, IMAGE),
        (FailedPod(0, "InvalidImageName"), 5, (), 0, False, IMAGE),
        # a configuration error or the max runtime: not retried
        (FailedPod(0, "CreateContainerConfigError"), 5, (), 0, False, OTHER),
        (FailedPod(0, "DeadlineExceeded"), 5, (), 0, False, OTHER),
    ],
)
def test_which_failures_are_retried(pod, max_retries, codes, done, retry, cause):
    decision = decide(pod, max_retries=max_retries, retry_on_exit_codes=codes, retries_done=done)
    assert (decision.retry, decision.cause) == (retry, cause)
    assert f"pod {pod.index}" in decision.detail
    assert (decision.backoff_s > 0) is retry


@pytest.mark.parametrize(("n", "seconds"), [(1, 30), (2, 60), (3, 120), (5, 480), (6, 600), (10, 600)])
def test_the_back_off_doubles_and_is_capped(n, seconds):
    assert backoff_s(n) == seconds


@pytest.mark.parametrize(
    ("not_before", "admitted"),
    [(None, True), (NOW - 1, True), (NOW, True), (NOW + 1, False), (NOW + 300, False)],
)
def test_a_retry_waits_out_its_back_off(not_before, admitted):
    snap = Snap().node("n0", gpus=8).quota("A", 8).pending(job(1, gpus=2, attempt=2, not_before=not_before))
    res = Result(schedule(snap.build()))
    assert (1 in res.admitted) is admitted
    if not admitted:
        assert res.code(1) == reasons.RETRY_BACKOFF
        assert res.reason[1].estimated_start == not_before
        assert res.reason[1].detail["attempt"] == 2


def test_a_job_in_back_off_does_not_hold_back_the_queue():
    snap = (Snap().node("n0", gpus=4).quota("A", 8)
            .pending(job(1, gpus=4, attempt=2, not_before=NOW + 60, submitted_at=NOW - 100))
            .pending(job(2, gpus=4)))
    res = Result(schedule(snap.build()))
    assert 2 in res.admitted and res.code(1) == reasons.RETRY_BACKOFF
