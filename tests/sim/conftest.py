"""The simulator's tests are pure (no Django): run them with ``-p no:django``."""

import pytest


@pytest.fixture(autouse=True)
def _eager_celery():
    """Overrides the portal-wide autouse fixture (it needs pytest-django's ``settings``): nothing to set here."""
    yield
