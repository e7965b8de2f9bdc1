"""A resizable job's pods are told its size range (torchrun's --nnodes=MIN:MAX) and, with a declared global batch
size, the per-worker batch and gradient-accumulation steps that keep it at the attempt's size."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.backends.kube.podspec import batch_split, rendezvous_env
from tests.fakes.k8s_fixtures import BASE_PODSET


@pytest.mark.parametrize(("batch", "workers", "most", "split"), [
    (256, 8, 8, (32, 1)),  # at its largest size: no accumulation
    (256, 4, 8, (32, 2)),  # half the workers: twice the steps, the same per-worker batch
    (256, 2, 8, (32, 4)),
])
def test_the_split_keeps_the_per_worker_batch_and_the_global_one(batch, workers, most, split):
    per, accum = batch_split(batch, workers, most)
    assert (per, accum) == split and per * accum * workers == batch


def test_without_an_exact_split_the_global_batch_comes_as_near_as_it_can_below():
    per, accum = batch_split(256, 6, 8)  # 6 workers: 32 x 2 x 6 = 384 is too many, 21 x 2 x 6 = 252
    assert (per, accum) == (21, 2)


def test_the_env_of_a_resizable_job():
    podset = replace(BASE_PODSET, pods=2, gpus_per_pod=2, min_pods=1, max_pods=4, global_batch_size=128)
    env = dict(rendezvous_env(podset, 1))
    assert (env["PORTAL_MIN_NODES"], env["PORTAL_MAX_NODES"], env["WORLD_SIZE"]) == ("1", "4", "2")
    # 4 workers now (2 pods x 2 GPUs), 8 at most: 16 a worker at most, so 16 x 2 steps
    assert (env["PORTAL_PER_WORKER_BATCH"], env["PORTAL_GRAD_ACCUM_STEPS"]) == ("16", "2")


def test_a_fixed_size_job_gets_none_of_it():
    env = dict(rendezvous_env(replace(BASE_PODSET, pods=2), 0))
    assert not {k for k in env if k.startswith(("PORTAL_MIN", "PORTAL_MAX", "PORTAL_PER_WORKER", "PORTAL_GRAD"))}
