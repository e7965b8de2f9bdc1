"""Pytest fixtures around the fake Kubernetes API (no Django needed).

Import them into a ``conftest.py`` (``from tests.fakes.k8s_fixtures import *``): ``kube_fake`` (a running fake
with namespaces ``team-a``/``team-b`` labelled PodSecurity ``restricted`` and the portal's tier classes),
``sleeps`` (records back-off sleeps instead of sleeping), ``kube_backend`` (the real adapter pointed at the
fake over HTTP), ``make_podset`` (a ``PodSet`` builder).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client as k8s

from scheduling.backends.base import MANAGED_BY, PodSet
from scheduling.backends.kube import FlavorRule, KubernetesBackend
from tests.fakes.k8s_api import FakeKube, FakeKubeServer

# The installation the fixtures' backend is: what its objects carry, and the only pods it takes for its own.
INSTALLATION = "portal-under-test"
TIER_CLASSES = {"ai-realtime": 1000000, "ai-elastic": 100000, "ai-backfill": 1000}
FLAVORS = (
    FlavorRule("a100-80gb", "nvidia.com/gpu", (("gpu-type", "a100"),)),
    FlavorRule("h100", "nvidia.com/gpu", (("gpu-type", "h100"),)),
    FlavorRule("a100-mig-3g.40gb", "nvidia.com/mig-3g.40gb", (("gpu-type", "a100"),)),
    FlavorRule("a100-mig-1g.10gb", "nvidia.com/mig-1g.10gb", (("gpu-type", "a100"),)),
)

BASE_PODSET = PodSet(
    job_id=42,
    attempt=1,
    namespace="team-a",
    department="vision",
    job_name="resnet sweep",
    owner="alice",
    image="ghcr.io/lab/train:1.0",
    command=("python", "train.py"),
    env=(("EPOCHS", "3"),),
    pods=1,
    gpus_per_pod=2,
    gpu_resource="nvidia.com/gpu",
    node_labels=(("gpu-type", "a100"),),
    cpu_millicores=4000,
    memory_mib=16384,
    tier="elastic",
    priority_class="ai-elastic",
    urgency="high",
    task_type="train",
    user_tier="pi",
    deadline="2026-12-01T12:00:00+00:00",
    bid=250,
    max_runtime_s=7200,
    termination_grace_s=45,
)


class SleepRecorder(list):
    """Stands in for ``time.sleep``: records the delays, sleeps only a token amount."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def kube_fake() -> Iterator[FakeKube]:
    server = FakeKubeServer(FakeKube()).start()
    fake = server.fake
    fake.add_namespace("team-a")
    fake.add_namespace("team-b")
    fake.add_namespace("default", restricted=False)
    for name, value in TIER_CLASSES.items():
        fake.add_priority_class(name, value, labels={"app.kubernetes.io/managed-by": MANAGED_BY},
                                preemption_policy="Never")
    yield fake
    server.stop()


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def kube_backend(kube_fake: FakeKube, sleeps: SleepRecorder) -> Iterator[KubernetesBackend]:
    backend = KubernetesBackend(host=kube_fake.url, flavors=FLAVORS, qps=0, timeout_s=2.0, connect_timeout_s=1.0,
                                watch_timeout_s=2, sleep=sleeps, installation=INSTALLATION)
    yield backend
    backend.close()


@pytest.fixture
def make_podset() -> Any:
    def build(**overrides: Any) -> PodSet:
        return replace(BASE_PODSET, **overrides)

    return build


@pytest.fixture
def raw_api(kube_fake: FakeKube) -> Iterator[k8s.ApiClient]:
    """A plain official client on the fake (for fake-level tests)."""
    cfg = k8s.Configuration()
    cfg.host = kube_fake.url
    cfg.retries = False
    api = k8s.ApiClient(cfg)
    yield api
    api.close()


__all__ = ["INSTALLATION", "kube_fake", "sleeps", "kube_backend", "make_podset", "raw_api", "BASE_PODSET", "FLAVORS",
           "TIER_CLASSES", "SleepRecorder"]
