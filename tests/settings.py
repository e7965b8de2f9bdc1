"""The portal's own settings, read after each test process has its own data folder and Redis database
(``tests/workers.py``). pytest-django loads this module (pyproject.toml, ``DJANGO_SETTINGS_MODULE``) before any
conftest.py runs, which is why the per-process environment is prepared here and not in a fixture. Processes a
test starts inherit the environment, this module's name included, and so read the same settings."""

from tests.workers import prepare_environment

prepare_environment()

from portal.settings import *  # noqa: E402, F403

if not IS_POSTGRES:  # noqa: F405
    # In memory, as Django makes it by default, in each worker too: pytest-django would otherwise name a
    # worker's SQLite file after the database's engine path (it recognises only Django's own engine name).
    DATABASES["default"]["TEST"] = {"NAME": ":memory:"}  # noqa: F405
