"""What the migration tests of the architecture step share (``test_migrations_approval.py``: the approval's
move; ``test_migrations_renames.py``: the renamed GPU fields and the rows quotas reaches through its port): the
database migrated back to just before the step, and forward again whatever a test does."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("quotas", "0006_quota_request_cluster"), ("scheduling", "0007_namespace_quota_refusal")]


def leaves():
    """Today's migrations: the last of each app."""
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def migrated_back(transactional_db):
    """The database as it was before the move; migrated forward again whatever the test does."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    yield executor.loader.project_state(BEFORE).apps
    MigrationExecutor(connection).migrate(leaves())
