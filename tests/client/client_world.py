"""Helpers of the client tests: drive the simulated cluster, script the client's clock, record or drop
what crosses the real HTTP transport. (A module of its own: test modules import it by name, which they
cannot do reliably with a conftest, since every test folder has one.)"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import httpx

JOB = {"name": "train-1", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
       "flavor": "a100-80gb", "gpus": 1}



def run_cycle() -> None:
    """One admission cycle, then the cluster's pod states read back (admitted -> running)."""
    from scheduling.services.cycle import run_cycle as cycle
    from scheduling.services.inventory import sync_cluster

    cycle()
    sync_cluster()


def age_pods(seconds: float) -> None:
    """Simulated time passes until the running pods have run ``seconds`` (of the cluster's clock: the test's
    ``ManualClock``); their log grows, some finish. Nothing here reads the wall clock."""
    from scheduling.backends import get_backend
    from scheduling.models import SimPod
    from scheduling.services.inventory import sync_cluster

    clock = get_backend().clock
    started = SimPod.objects.filter(phase="Running").order_by("started_at").values_list("started_at", flat=True)
    if started:
        clock.set(max(clock.now(), started[0] + timedelta(seconds=seconds)))
    sync_cluster()


def finish_pods() -> None:
    """Simulated time passes until every running pod has reached the end of its runtime."""
    from scheduling.backends import get_backend
    from scheduling.models import SimPod
    from scheduling.services.inventory import sync_cluster

    backend = get_backend()
    ends = [started + timedelta(seconds=runtime / backend.speedup) for started, runtime in
            SimPod.objects.filter(phase="Running").values_list("started_at", "runtime_s")]
    if ends:
        backend.clock.set(max([backend.clock.now(), *ends]))
    sync_cluster()


class Script:
    """A ``sleep`` for the client: each call runs the next step (then does nothing once they are used up)
    and records the pause asked for."""

    def __init__(self, *steps: Callable[[], None]):
        self.steps = list(steps)
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)
        if self.steps:
            self.steps.pop(0)()


class Recorder(httpx.BaseTransport):
    """The real HTTP transport, recording every request; ``lose`` answers are dropped after the portal
    handled them (the client sees a read error, as when a connection dies on the way back)."""

    def __init__(self, lose: int = 0):
        self.inner = httpx.HTTPTransport()
        self.requests: list[httpx.Request] = []
        self.lose = lose

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = self.inner.handle_request(request)
        if self.lose > 0:
            self.lose -= 1
            response.read()
            response.close()
            raise httpx.ReadError("connection reset by peer (the answer was lost)", request=request)
        return response

    def close(self) -> None:
        self.inner.close()
