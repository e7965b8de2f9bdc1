"""Fixtures for the fake Kubernetes API tests; no Django needed (runs with ``-p no:django``)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.k8s_fixtures import kube_backend, kube_fake, make_podset, raw_api, sleeps  # noqa: E402, F401


@pytest.fixture(autouse=True)
def _eager_celery():
    """Overrides the Django/Celery autouse fixture of tests/conftest.py: these tests use neither."""
    yield
