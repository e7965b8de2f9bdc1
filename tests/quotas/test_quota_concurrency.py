"""Quota writes under concurrency, against real PostgreSQL: two admins creating the same quota at the same
instant get one quota and one field error (not a 500), and two changes that each fit the flavor's GPUs alone
cannot oversubscribe it together."""

from __future__ import annotations

import pytest
from test_budget_concurrency import _in_threads

from portal.errors import ValidationFailed
from quotas.models import Quota
from quotas.services import rules


def _codes(errors):
    assert all(isinstance(e, ValidationFailed) for e in errors), errors
    return sorted(item["code"] for e in errors for items in e.fields.values() for item in items)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_quota_created_twice_at_once_exists_once(lab):
    for attempt in range(5):  # the race is a matter of timing: give it several chances to show
        Quota.objects.filter(department=lab.platform).delete()
        results, errors = _in_threads(
            lambda _: rules.quota_create(department=lab.platform, flavor=lab.a100, nominal=0, actor=lab.root),
            [1, 2], threads=2,
        )
        assert len(results) == 1 and _codes(errors) == ["unique"], attempt
        assert Quota.objects.filter(department=lab.platform, flavor=lab.a100).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_changes_that_fit_alone_do_not_oversubscribe_together(lab):
    # 8 A100 GPUs; vision and nlp hold 4 each. Each asks for 2 more than it has after both are lowered to 2:
    # either change fits alone (2 + 6 = 8), both together would make 12.
    vision = Quota.objects.get(department=lab.vision, flavor=lab.a100)
    nlp = Quota.objects.get(department=lab.nlp, flavor=lab.a100)
    for attempt in range(5):
        Quota.objects.filter(pk__in=[vision.pk, nlp.pk]).update(nominal=2)
        results, errors = _in_threads(
            lambda q: rules.quota_set(quota=q, actor=lab.root, nominal=6), [vision, nlp], threads=2,
        )
        assert len(results) == 1 and _codes(errors) == ["over_capacity"], attempt
        total = sum(Quota.objects.filter(flavor=lab.a100, cluster=None).values_list("nominal", flat=True))
        assert total == 8
