"""What a submission reads about its submitter: the department's approval rule and the owner's allowance, in one
query, the same rows as reading each on its own."""

from __future__ import annotations

import pytest

from quotas.models import Allowance, ApprovalRule, Wallet
from quotas.services.submission_checks import submission_check_inputs

pytestmark = pytest.mark.django_db


def test_neither_rule_nor_allowance(lab, django_assert_num_queries):
    with django_assert_num_queries(1):
        inputs = submission_check_inputs(department_id=lab.vision.pk, owner_id=lab.alice.pk)
    assert inputs.rule is None and inputs.allowance is None and inputs.used == 0


def test_the_rule_and_the_allowance_are_the_stored_rows(lab):
    rule = ApprovalRule.objects.create(department=lab.vision, gpus_above=2, realtime=True)
    wallet = Wallet.objects.create(department=lab.vision, balance=1000)
    mine = Allowance.objects.create(user=lab.alice, wallet=wallet, limit=500, period="weekly")
    Allowance.objects.create(user=lab.amy, wallet=wallet, limit=9, period="monthly")  # another member's
    inputs = submission_check_inputs(department_id=lab.vision.pk, owner_id=lab.alice.pk)
    assert inputs.rule == rule and (inputs.rule.gpus_above, inputs.rule.realtime) == (2, True)
    got = inputs.allowance
    assert (got.pk, got.user_id, got.wallet_id, got.limit, got.period) == (mine.pk, lab.alice.pk, wallet.pk, 500,
                                                                          "weekly")
    # another department's rule is not this one's; a user with no allowance has none
    other = submission_check_inputs(department_id=lab.nlp.pk, owner_id=lab.bob.pk)
    assert other.rule is None and other.allowance is None
