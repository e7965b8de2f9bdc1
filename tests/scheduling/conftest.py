"""Fixtures of the scheduling tests that run the portal on the Kubernetes backend against the fake API."""

from __future__ import annotations

import pytest

from scheduling import backends
from scheduling.models import Node
from scheduling.services.inventory import sync_cluster
from tests.fakes.k8s_fixtures import kube_fake, sleeps  # noqa: F401 - fixtures


@pytest.fixture
def kube(lab, kube_fake, sleeps, settings):  # noqa: F811
    from scheduling.backends.factory import kubernetes_backend

    settings.SCHEDULING_BACKEND = "kubernetes"  # the cluster row still says "simulated": the backend decides
    settings.PORTAL_INSTALLATION_ID = "lab-portal"  # as the manifests in the docs show it
    Node.objects.all().delete()  # inventory comes from the cluster now
    for ns in ("gpu-vision", "gpu-nlp"):
        kube_fake.add_namespace(ns)
    for i in range(2):
        kube_fake.add_node(f"gpu-{i}", gpus=4, labels={"gpu-type": "a100"})
    kube_fake.add_node("cpu-0", labels={"role": "cpu"})
    backend = kubernetes_backend("default", host=kube_fake.url, qps=0, timeout_s=2.0, connect_timeout_s=1.0,
                                 watch_timeout_s=2, sleep=sleeps)
    backends._cache["default"] = backend
    sync_cluster()
    yield kube_fake
    backend.close()
