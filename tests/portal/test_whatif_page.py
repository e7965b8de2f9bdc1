"""The dashboard's What-if page: admins replay the recorded history under a proposed policy or quotas.

Permissions: researchers 403, department admins see their own department's row (and the cluster-wide figures),
platform admins see every department and can carry the proposed policy into the policy editor."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db


def _record(job, *, submitted, ran_min):
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, submitted_at=submitted, started_at=submitted,
                                          finished_at=submitted + timedelta(minutes=ran_min))


@pytest.fixture
def history(lab, submit):
    """Yesterday 8 four-GPU jobs of vision arrived within a minute on the 8-GPU cluster: alice's (standard
    user tier) run 10 minutes, vadmin's (pi) 3 hours, so which user tier goes first decides vision's waits.
    Two days ago nlp ran two small jobs on an idle cluster."""
    t0 = timezone.now() - timedelta(days=1)
    for i in range(8):
        user, minutes = (lab.alice, 10) if i % 2 else (lab.vadmin, 180)
        job = submit(user, name=f"v{i}", gpus=4, tier="elastic", urgency="normal", max_runtime_s=4 * 3600)
        _record(job, submitted=t0 + timedelta(seconds=5 * i), ran_min=minutes)
    for i in range(2):
        job = submit(lab.bob, name=f"n{i}", gpus=1, tier="elastic", max_runtime_s=3600)
        _record(job, submitted=t0 - timedelta(days=1, minutes=30 * i), ran_min=20)
    return lab


def _proposal(favour: str) -> dict:
    from scheduling.services.policy import current_policy, policy_as_dict

    doc = policy_as_dict(current_policy()[0])
    other = "pi" if favour == "standard" else "standard"
    doc["weights"] = {"normal": {favour: 50.0, other: 0.1}}
    return doc


def _post(client, *, policy=None, days="7", **quotas):
    data = {"days": days, "policy": policy if isinstance(policy, str) else json.dumps(policy or _proposal("pi"))}
    data.update({k.replace("__", ":"): v for k, v in quotas.items()})
    return client.post("/whatif/", data)


def test_researchers_are_refused_and_see_no_link(client, history):
    client.force_login(history.alice)
    assert client.get("/whatif/").status_code == 403
    assert _post(client).status_code == 403
    assert b'href="/whatif/"' not in client.get("/").content
    client.force_login(history.stranger)  # a member of nothing: refused like any missing role
    assert client.get("/whatif/").status_code == 403
    for admin in (history.vadmin, history.root):
        client.force_login(admin)
        assert b'href="/whatif/"' in client.get("/").content
        page = client.get("/whatif/")
        assert page.status_code == 200 and b"Replay and compare" in page.content


def test_platform_admin_sees_every_department_and_can_apply_the_policy(client, history):
    client.force_login(history.root)
    r = _post(client)
    html = r.content.decode()
    assert r.status_code == 200, html[:3000]
    assert 'data-dept="vision"' in html and 'data-dept="nlp"' in html and 'data-tier="elastic"' in html
    assert "Replayed <strong>10</strong> jobs" in html and "offered load" in html
    assert "weights.normal.pi" in html  # what the proposal changes
    assert 'id="whatif-apply"' in html
    editor = client.get("/policy/?from=whatif").content.decode()
    assert 'id="from-whatif"' in editor and "50.0" in editor.split("<textarea")[1]
    # the policy is not saved by the what-if page or by opening the editor
    from scheduling.models import PolicyVersion

    assert PolicyVersion.objects.count() == 0


def test_department_admin_sees_only_their_department(client, history):
    client.force_login(history.nadmin)
    page = client.get("/whatif/").content.decode()
    assert 'name="quota:nlp:a100-80gb:nominal"' in page and "quota:vision:" not in page
    r = _post(client)
    html = r.content.decode()
    assert r.status_code == 200, html[:3000]
    assert 'data-dept="nlp"' in html and 'data-dept="vision"' not in html
    assert 'id="whatif-apply"' not in html  # only platform admins change the policy
    # their own quotas they may try; another department's are refused with a form error
    ok = _post(client, **{"quota__nlp__a100-80gb__nominal": "2"})
    assert ok.status_code == 200 and "quota nlp/a100-80gb nominal 2" in ok.content.decode()
    bad = _post(client, **{"quota__vision__a100-80gb__nominal": "8"})
    assert bad.status_code == 400 and b"your own department only" in bad.content
    client.force_login(history.vadmin)
    html = _post(client).content.decode()
    assert 'data-dept="vision"' in html and 'data-dept="nlp"' not in html


def test_the_replay_follows_the_proposed_policy(history):
    """A real replay of the recorded history: favouring the short jobs' user tier must cut vision's waits."""
    from scheduling.services.whatif import run_whatif

    short_first = run_whatif(days=7, proposed_policy=_proposal("standard"))
    long_first = run_whatif(days=7, proposed_policy=_proposal("pi"))
    assert short_first.jobs == long_first.jobs == 10 and not short_first.capped
    same = json.dumps(short_first.result["current"], sort_keys=True)  # NaN == NaN as text
    assert same == json.dumps(long_first.result["current"], sort_keys=True)  # a deterministic baseline
    fast = short_first.result["proposed"]["wait_dept"]["vision"]["avg"]
    slow = long_first.result["proposed"]["wait_dept"]["vision"]["avg"]
    assert fast < slow - 3600, (fast, slow)
    assert short_first.result["diff"]["wait_avg"] == pytest.approx(
        short_first.result["proposed"]["wait_avg"] - short_first.result["current"]["wait_avg"])


def test_a_quota_change_alone_is_replayed(client, history):
    from scheduling.services.whatif import quota_change, run_whatif

    res = run_whatif(days=7, quota_changes=[quota_change("nlp", "a100-80gb", 0, 0, 0)])
    assert not res.policy_changed
    assert res.result["current"]["never_started"] == 0 and res.result["proposed"]["never_started"] == 2
    client.force_login(history.root)
    from scheduling.services.policy import current_policy, policy_as_dict

    unchanged = policy_as_dict(current_policy()[0])
    r = _post(client, policy=unchanged, **{"quota__nlp__a100-80gb__nominal": "0",
                                           "quota__nlp__a100-80gb__borrowing_limit": "0"})
    html = r.content.decode()
    assert r.status_code == 200 and "policy unchanged" in html and "quota nlp/a100-80gb nominal 0" in html
    assert 'id="whatif-apply"' not in html


@pytest.mark.parametrize(("policy", "fields", "message"), [
    ("{not json", {}, "Not valid JSON"),
    ("[1, 2]", {}, "must be a JSON object"),
    ({"aging_per_minute": -1}, {}, "aging_per_minute"),
    ({"weights": {"urgent!": {"pi": 1}}}, {}, "Unknown urgency"),
    (None, {"quota__nlp__a100-80gb__nominal": "-2"}, "cannot be negative"),
    (None, {"quota__nlp__a100-80gb__borrowing_limit": "two"}, "whole numbers"),
    (None, {"quota__nlp__a100-80gb__nominal": "2.5"}, "whole numbers"),
    (None, {"quota__nlp__a100-80gb__lending_limit": "9"}, "cannot exceed the nominal"),
    (None, {"quota__physics__a100-80gb__nominal": "2"}, "unknown department"),
    (None, {"quota__nlp__h100__nominal": "2"}, "unknown flavor"),
    (None, {"quota__nlp": "2"}, "not a quota field"),
    (None, {"days": "5"}, "Choose one of"),
    (None, {"days": "a week"}, "Choose one of"),
])
def test_bad_input_is_a_form_error(client, history, policy, fields, message):
    client.force_login(history.root)
    fields = dict(fields)
    r = _post(client, policy=policy, days=fields.pop("days", "7"), **fields)
    assert r.status_code == 400 and message in r.content.decode(), r.content.decode()[:3000]


def test_nothing_to_compare(client, history):
    from scheduling.services.policy import current_policy, policy_as_dict

    client.force_login(history.root)
    r = _post(client, policy=policy_as_dict(current_policy()[0]))
    assert r.status_code == 400 and b"Nothing to compare" in r.content


def test_no_history_in_the_window(client, lab):
    client.force_login(lab.root)
    r = _post(client, days="1")
    assert r.status_code == 400 and b"No jobs in the last 1 day to replay" in r.content


def test_the_history_is_capped_and_says_so(client, history, settings):
    settings.WHATIF_MAX_JOBS = 4
    client.force_login(history.root)
    html = _post(client).content.decode()
    assert 'id="whatif-capped"' in html and "holds 10 jobs" in html and "Replayed <strong>4</strong>" in html


def test_a_replay_that_runs_too_long_is_stopped(client, history, settings):
    settings.WHATIF_TIME_LIMIT_S = 0
    client.force_login(history.root)
    r = _post(client)
    assert r.status_code == 400 and b"did not finish within 0 s" in r.content
