"""The realtime-cost benchmark's classification of late realtime starts (benchmarks/realtime_cost.py)."""

from types import SimpleNamespace as NS

import pytest

from benchmarks.realtime_cost import _forced_late

TARGET, COOLDOWN = 300.0, 600.0


def _rec(tier, submit, gpus, first_start=None, runs=()):
    return NS(spec=NS(tier=tier, submit=submit, total_gpus=gpus, flavor="a100"), first_start=first_start, runs=list(runs))


def _scenario(gpus=8):
    return NS(nodes=lambda: [NS(flavor="a100", gpus=gpus)])


@pytest.mark.parametrize(
    ("running", "forced"),
    [
        ([(990.0, 5000.0, 8)], 1),  # a whole-node job started 10 s before: nothing preemptible in time
        ([(990.0, 5000.0, 4), (990.0, 5000.0, 4)], 1),  # two fresh jobs fill the node
        ([(100.0, 5000.0, 8)], 0),  # out of its cooldown within the target: a policy could have preempted it
        ([(990.0, 5000.0, 7)], 0),  # a GPU was free at arrival
        ([(100.0, 900.0, 8), (990.0, 5000.0, 4)], 0),  # the first job had ended: four GPUs free
    ],
)
def test_a_late_realtime_start_is_forced_only_when_every_gpu_is_held_inside_its_cooldown(running, forced):
    jobs = [_rec("elastic", start, gpus, first_start=start, runs=[(start, end)]) for start, end, gpus in running]
    jobs.append(_rec("realtime", 1000.0, 1, first_start=1000.0 + 2 * TARGET, runs=[(1600.0, 2000.0)]))
    assert _forced_late(NS(jobs=jobs), _scenario(), TARGET, COOLDOWN) == (1, forced)


def test_a_realtime_job_started_in_time_is_not_late():
    jobs = [_rec("realtime", 1000.0, 1, first_start=1000.0 + TARGET, runs=[(1300.0, 2000.0)])]
    assert _forced_late(NS(jobs=jobs), _scenario(), TARGET, COOLDOWN) == (0, 0)
