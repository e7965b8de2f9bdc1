"""Real-cluster tests (``pytest -m kube``): need KUBECONFIG; no Django, no Celery."""

import pytest


@pytest.fixture(autouse=True)
def _eager_celery():
    """Overrides the Django/Celery autouse fixture of tests/conftest.py: these tests use neither."""
    yield
