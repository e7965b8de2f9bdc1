"""Fixtures for the fake Kubernetes API tests; no Django needed (runs with ``-p no:django``)."""

import pytest

from tests.fakes.k8s_fixtures import kube_backend, kube_fake, make_podset, raw_api, sleeps  # noqa: F401


@pytest.fixture(autouse=True)
def _eager_celery():
    """Overrides the Django/Celery autouse fixture of tests/conftest.py: these tests use neither."""
    yield
