"""The core's tests are pure: neutralise the Django-only autouse fixtures of tests/conftest.py here."""

import pytest


@pytest.fixture(autouse=True)
def _eager_celery():
    yield
