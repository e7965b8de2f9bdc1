"""A training job of two roles on the demo's lab (four-GPU trainer, two restart-pod data workers), and one step
of the simulated cluster: what the tests of failure policies and events by role run."""

from __future__ import annotations

from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

TRAIN = {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
         "flavor": "a100-80gb", "env": {"SIM_DURATION_S": "600"},
         "roles": [{"name": "trainer", "pods": 1, "gpus": 4, "cpu": "16", "memory": "64Gi"},
                   {"name": "data", "pods": 2, "cpu": "4", "memory": "8Gi", "failure_policy": "restart-pod",
                    "command": ["python", "loader.py"]}]}


def step(go, sim_clock, seconds=0):
    """Advance the simulated clock, then sync, decide and sync again."""
    if seconds:
        sim_clock.advance(seconds)
    go(sync_cluster)
    go(run_cycle)
    go(sync_cluster)
