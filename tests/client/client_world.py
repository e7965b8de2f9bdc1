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
    from scheduling.services.clusters import sync_cluster
    from scheduling.services.cycle import run_cycle as cycle

    cycle()
    sync_cluster()


def age_pods(seconds: float) -> None:
    """Running pods started ``seconds`` earlier (simulated time passes); their log grows, some finish."""
    from django.utils import timezone

    from scheduling.models import SimPod
    from scheduling.services.clusters import sync_cluster

    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(seconds=seconds))
    sync_cluster()


def finish_pods() -> None:
    age_pods(86400)


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
