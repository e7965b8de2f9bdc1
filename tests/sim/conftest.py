"""The simulator's tests are pure (no Django): run them with ``-p no:django``."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _eager_celery():
    """Overrides the portal-wide autouse fixture (it needs pytest-django's ``settings``): nothing to set here."""
    yield
