"""Real-cluster tests (``pytest -m kube``): need KUBECONFIG; no Django, no Celery."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _eager_celery():
    """Overrides the Django/Celery autouse fixture of tests/conftest.py: these tests use neither."""
    yield
