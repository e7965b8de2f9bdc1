"""The cross-tenant walk as the other department's admin (the researcher's walk, the rule it checks and the
tests that the walk can fail are in ``test_cross_tenant_walk.py``; two files, so that ``--dist loadfile`` runs
the two walks on two workers): no page or endpoint, under any verb, shows or changes anything of the department
that is not theirs, though their role opens more of their own department's pages and actions than a
researcher's."""

from __future__ import annotations

import pytest

from tests.portal.tenant_walk import NOTHING_FOUND, walk_as

pytestmark = pytest.mark.django_db


def test_another_departments_admin_sees_and_changes_nothing_of_it(lab):
    assert walk_as(lab, lab.nadmin) == NOTHING_FOUND
