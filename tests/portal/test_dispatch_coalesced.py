"""``dispatch.coalesced``: the batches of many short transactions leave as one message per task, after the
block, and only what committed."""

from __future__ import annotations

import pytest
from django.db import transaction

from portal import dispatch

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: on-commit callbacks run as in a worker


@pytest.fixture
def sent(monkeypatch):
    """The messages ``notifications.deliver`` would get: (task name, items) per send."""
    out = []
    monkeypatch.setattr("portal.broker.send", lambda task, items: out.append((task.name, list(items))))
    return out


def test_the_batches_of_the_blocks_transactions_leave_together_at_its_end(sent):
    with dispatch.coalesced():
        for item in (1, 2):
            with transaction.atomic():
                dispatch.after_commit_batched("notifications.deliver", item)
        with pytest.raises(RuntimeError), transaction.atomic():  # rolled back: never sent
            dispatch.after_commit_batched("notifications.deliver", 3)
            raise RuntimeError
        dispatch.after_commit_batched("notifications.deliver", 4)  # outside a transaction: held too
        dispatch.after_commit_batched("scheduling.pods.keep_logs", [9, 1])
        assert sent == []  # nothing before the block ends
    assert sorted(sent) == [("notifications.deliver", [1, 2, 4]), ("scheduling.pods.keep_logs", [[9, 1]])]


def test_what_committed_is_sent_even_when_the_block_raises(sent):
    with pytest.raises(RuntimeError), dispatch.coalesced():
        with transaction.atomic():
            dispatch.after_commit_batched("notifications.deliver", 1)
        raise RuntimeError
    assert sent == [("notifications.deliver", [1])]


def test_without_a_block_each_transaction_sends_its_own_message(sent):
    for item in (1, 2):
        with transaction.atomic():
            dispatch.after_commit_batched("notifications.deliver", item)
    with dispatch.coalesced(), dispatch.coalesced():  # a nested block belongs to the outer one
        with transaction.atomic():
            dispatch.after_commit_batched("notifications.deliver", 3)
        assert sent == [("notifications.deliver", [1]), ("notifications.deliver", [2])]
    assert sent[2:] == [("notifications.deliver", [3])]
