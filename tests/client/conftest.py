"""The Python client and gpup against the real portal: pytest-django's live server (a real HTTP server in a
thread of this process), real users with real API tokens, real jobs on the simulated cluster.

Nothing here mocks the transport. Where a test needs the network to misbehave (an answer lost after the
portal handled the request), it wraps the real transport, which still carries the request to the portal.

The client's ``sleep`` is the test's clock: each pause between polls or retries runs the next step of a
script (an admission cycle, a pod finishing), so ``wait`` and ``logs(follow=True)`` see a job move through its
life exactly as a notebook would, without threads and without real waiting.
"""

from __future__ import annotations

import pytest
from client_world import JOB
from django.core.cache import cache

from gpuportal import Client


@pytest.fixture(autouse=True)
def _fresh_throttle():
    cache.clear()  # the submit rate's history lives in the cache, shared by the whole test process
    yield
    cache.clear()


@pytest.fixture
def gpup(live_server, lab, token_for, tmp_path):
    """gpup(*args, user=alice, input=None) -> click's Result (exit_code, stdout, stderr), against the live
    portal (a test module may keep its own)."""
    from click.testing import CliRunner

    from gpuportal.cli import cli

    runner = CliRunner()

    def run(*args, user=None, input=None, env=None):
        base = {"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": token_for(user or lab.alice),
                "GPU_PORTAL_CONFIG": str(tmp_path / "config.toml")}
        return runner.invoke(cli, list(map(str, args)), env={**base, **(env or {})}, input=input,
                             catch_exceptions=False)

    return run


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


@pytest.fixture
def job_spec():
    def make(**overrides) -> dict:
        return {**JOB, **overrides}

    return make
