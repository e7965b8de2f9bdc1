"""The Python client and gpup against the real portal: pytest-django's live server (a real HTTP server in a
thread of this process), real users with real API tokens, real jobs on the simulated cluster.

Nothing here mocks the transport. Where a test needs the network to misbehave (an answer lost after the
portal handled the request), it wraps the real transport, which still carries the request to the portal.

The client's ``sleep`` is the test's clock: each pause between polls or retries runs the next step of a
script (an admission cycle, a pod finishing), so ``wait`` and ``logs(follow=True)`` see a job move through its
life exactly as a notebook would, without threads and without real waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest
from django.core.cache import cache

from gpuportal import Client


@pytest.fixture(autouse=True)
def _fresh_throttle():
    cache.clear()  # the submit rate's history lives in the cache, shared by the whole test process
    yield
    cache.clear()


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


@pytest.fixture
def token_for(lab):
    from portal.models import ApiToken

    def make(user) -> str:
        return ApiToken.issue(user=user, name="notebook")[1]

    return make


@pytest.fixture
def portal(live_server, lab, token_for):
    """client(user=alice, **kwargs) -> a gpuportal.Client for ``user`` on the live portal."""
    made: list[Client] = []

    def client(user=None, **kwargs) -> Client:
        kwargs.setdefault("backoff", 0.01)
        c = Client(live_server.url, token_for(user or lab.alice), **kwargs)
        made.append(c)
        return c

    client.url = live_server.url
    yield client
    for c in made:
        c.close()


JOB = {"name": "train-1", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
       "flavor": "a100-80gb", "gpus": 1}


@pytest.fixture
def job_spec():
    def make(**overrides) -> dict:
        return {**JOB, **overrides}

    return make
