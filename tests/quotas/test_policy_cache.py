"""The submission's rules, limits and ceilings kept per process (``quotas.policy_cache``): read once, and read
again as soon as one of them changes, whoever changed it."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas import policy_cache
from quotas.models import Quota

pytestmark = pytest.mark.django_db

KEPT = ('"quotas_userlimit"', '"quotas_quota"', '"quotas_approvalrule"', '"quotas_allowance"')


@pytest.fixture
def kept(lab, monkeypatch):
    """The cache as with Redis (shared by every process); this one process's memory stands in for it. The
    lab's rows count as committed (the test's transaction never commits: in it, every read would go to the
    database, as in the transaction that changed a row)."""
    monkeypatch.setattr(policy_cache, "enabled", lambda: True)
    connection.run_on_commit = [c for c in connection.run_on_commit if c[1] is not policy_cache._new_token]
    cache.delete(policy_cache.KEY)
    policy_cache._rows.clear()
    yield
    cache.delete(policy_cache.KEY)
    policy_cache._rows.clear()


@pytest.fixture
def post(lab, client_for, payload, monkeypatch):
    from scheduling import tasks

    monkeypatch.setattr(tasks.create_pods_many, "delay", lambda *a, **k: None)
    client = client_for(lab.alice)
    count = iter(range(1000))

    def send(**fields):
        return client.post("/api/v1/jobs", payload(name=f"j{next(count)}", **fields), format="json")

    return send


def _kept_rows_read(sql: list[str]) -> list[str]:
    return [s for s in sql if any(table in s for table in KEPT)]


def test_a_second_submission_reads_no_rule_limit_or_quota(kept, post):
    assert post().status_code == 201
    with CaptureQueriesContext(connection) as q:
        assert post().status_code == 201
    sql = [x["sql"] for x in q.captured_queries]
    assert _kept_rows_read(sql) == [], "\n".join(sql)


def test_without_a_shared_cache_every_submission_reads_them(lab, post, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert not policy_cache.enabled()  # one process's memory: another's change would never reach it
    assert post().status_code == 201
    with CaptureQueriesContext(connection) as q:
        assert post().status_code == 201
    assert len(_kept_rows_read([x["sql"] for x in q.captured_queries])) == 3


def test_a_new_approval_rule_applies_to_the_next_submission(kept, lab, post, django_capture_on_commit_callbacks):
    from quotas.services.rules import approval_rule_set

    assert post().json()["state"] == "queued"
    with django_capture_on_commit_callbacks(execute=True):
        approval_rule_set(department=lab.vision, actor=lab.vadmin, gpus_above=0)
    assert post().json()["state"] == "pending_approval"


def test_the_transaction_that_changed_a_rule_reads_it(kept, lab, post):
    from quotas.services.rules import approval_rule_set

    assert post().json()["state"] == "queued"
    approval_rule_set(department=lab.vision, actor=lab.vadmin, gpus_above=0)  # not committed yet
    assert post().json()["state"] == "pending_approval"


def test_a_lowered_quota_refuses_the_next_gang_above_it(kept, lab, post, django_capture_on_commit_callbacks):
    assert post(gpus=4, pods=2).status_code == 201  # nominal 4 + borrowing 4
    quota = Quota.objects.get(department=lab.vision, flavor=lab.a100)
    quota.borrowing_limit = 0
    with django_capture_on_commit_callbacks(execute=True):
        quota.save()
    r = post(gpus=4, pods=2)
    assert r.status_code == 400 and "exceeds_quota_ceiling" in str(r.json()), r.content


def test_a_new_queued_jobs_limit_refuses_the_next_submission(kept, lab, post, django_capture_on_commit_callbacks):
    from quotas.services.user_limits import user_limit_set

    assert post().status_code == 201
    with django_capture_on_commit_callbacks(execute=True):
        user_limit_set(department=lab.vision, user=lab.alice, max_gpus=8, max_queued=1, actor=lab.vadmin)
    assert post().status_code == 429


def test_the_token_changes_only_when_a_change_commits(kept, lab, post, django_capture_on_commit_callbacks):
    token = policy_cache._token()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        Quota.objects.get(department=lab.vision, flavor=lab.a100).save()
    assert len(callbacks) == 1 and policy_cache._token() == token  # only a commit changes the token


def test_rows_read_while_a_change_commits_are_not_kept():
    calls = []

    def load():  # another process's change commits while this one reads
        calls.append(1)
        policy_cache._new_token()
        return len(calls)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(policy_cache, "enabled", lambda: True)
        try:
            assert policy_cache.cached("test", (1,), load) == 1
            assert policy_cache.cached("test", (1,), lambda: "fresh") == "fresh"
        finally:
            cache.delete(policy_cache.KEY)
            policy_cache._rows.clear()


def test_an_unreachable_cache_reads_the_database(kept, post, monkeypatch):
    def down(*a, **k):
        raise ConnectionError("redis down")

    monkeypatch.setattr(cache, "get", down)
    assert post().status_code == 201
    with CaptureQueriesContext(connection) as q:
        assert post().status_code == 201
    assert len(_kept_rows_read([x["sql"] for x in q.captured_queries])) == 3
