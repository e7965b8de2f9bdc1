"""Where events come from (approvals, preemption, budgets, allowances), the preferences and webhooks API with
its field errors and tenancy, and the unsubscribe link."""

from __future__ import annotations

import re

import pytest

from notifications.models import Delivery, DepartmentSettings, Event, Preference
from scheduling.models import JobState
from scheduling.services import job_approvals, lifecycle

pytestmark = pytest.mark.django_db


def _subjects(inbox):
    return sorted((m["to"][0], m["subject"].removeprefix("[GPU portal] ")) for m in inbox.messages)


def test_approval_requested_goes_to_the_admins_and_the_decision_to_the_submitter(lab, submit, go, smtp_server):
    from quotas.services import rules

    rules.approval_rule_set(department=lab.vision, actor=lab.vadmin, gpus_above=1)
    job = go(submit, lab.alice, name="big", gpus=2)
    assert job.state == JobState.PENDING_APPROVAL
    assert _subjects(smtp_server) == [("vadmin@x.test", f"Job {job.pk} by alice waits for your approval")]
    go(job_approvals.job_reject, user=lab.vadmin, job=job, comment="too big for now")
    assert ("alice@x.test", f"Job {job.pk} (big) was rejected") in _subjects(smtp_server)
    mail = [m for m in smtp_server.messages if m["to"] == ["alice@x.test"]][0]
    assert "vadmin rejected" in mail["body"] and "too big for now" in mail["body"]
    assert not any(m["to"] == ["amy@x.test"] for m in smtp_server.messages)  # a colleague hears nothing


def test_a_preempted_job_says_why_and_that_it_was_requeued(lab, running_job, go, smtp_server):
    job = running_job(lab.alice, name="elastic")
    assert go(lifecycle.requeue, job=job, outcome="preempted", reason="Evicted",
              message="pod job-1-a1 evicted for job 9 (reclaim)")
    event = Event.objects.get(kind="job.preempted")
    assert event.data["requeued"] is True and event.data["reason"] == "Evicted" and event.data["attempt"] == 2
    [mail] = smtp_server.messages
    assert mail["subject"] == f"[GPU portal] Job {job.pk} (elastic) was preempted"
    assert "(Evicted)" in mail["body"] and "queued again as attempt 2" in mail["body"]


def test_a_platform_failure_requeue_is_not_a_preemption(lab, running_job, go, smtp_server):
    job = running_job(lab.alice)
    assert go(lifecycle.requeue, job=job, outcome="platform_failure", reason="NodeLost", message="node gone")
    assert not Event.objects.filter(kind="job.preempted").exists() and smtp_server.messages == []


def test_budget_low_goes_to_the_admins_once_per_descent_with_the_default_threshold(lab, go, smtp_server):
    from quotas.services import rules, wallets

    wallets.wallet_create(department=lab.vision, actor=lab.root, balance=20_000)
    rules.refill_rule_set(department=lab.vision, actor=lab.root, mode="fixed", amount=100_000, period="monthly",
                          active=True)  # default threshold: 10% = 10,000 mcr
    go(wallets.wallet_adjust, department=lab.vision, amount=-5_000, actor=lab.root, comment="spend")
    assert smtp_server.messages == []  # 15,000: still above
    go(wallets.wallet_adjust, department=lab.vision, amount=-6_000, actor=lab.root, comment="spend")
    assert _subjects(smtp_server) == [("vadmin@x.test", "Budget of vision is low: 9.000 cr left")]
    go(wallets.wallet_adjust, department=lab.vision, amount=-1_000, actor=lab.root, comment="spend")
    assert len(smtp_server.messages) == 1  # already below: one descent, one alert
    go(wallets.wallet_adjust, department=lab.vision, amount=50_000, actor=lab.root, comment="top up")
    DepartmentSettings.objects.create(department=lab.vision, budget_low_threshold=40_000)  # its own threshold
    go(wallets.wallet_adjust, department=lab.vision, amount=-20_000, actor=lab.root, comment="spend")
    assert len(smtp_server.messages) == 2 and "below the alert threshold of 40.000 cr" in smtp_server.messages[-1]["body"]


def test_allowance_exhausted_tells_the_user_and_the_admins_once_per_period(lab, submit, go, smtp_server):
    from quotas.models import Price
    from quotas.services import allowances, wallets

    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    wallets.wallet_create(department=lab.vision, actor=lab.root, balance=100_000)
    allowances.allowance_set(user=lab.alice, limit=1_500, actor=lab.vadmin)
    first = go(submit, lab.alice, name="fits", max_runtime_s=3600)  # 1,000 mcr
    assert first.state == JobState.QUEUED and smtp_server.messages == []
    over = go(submit, lab.alice, name="over", max_runtime_s=3600)
    assert over.state == JobState.PENDING_APPROVAL
    exhausted = [m for m in smtp_server.messages if "allowance is exhausted" in m["subject"]]
    assert sorted(m["to"][0] for m in exhausted) == ["alice@x.test", "vadmin@x.test"]
    go(submit, lab.alice, name="over-again", max_runtime_s=3600)
    assert len([m for m in smtp_server.messages if "allowance is exhausted" in m["subject"]]) == 2  # not again
    assert Event.objects.filter(kind="allowance.exhausted").count() == 1


# ------------------------------------------------------------------------------------------ API


def test_bad_input_is_a_400_with_field_errors(lab, client_for):
    c = client_for(lab.alice)
    r = c.put("/api/v1/notifications/preferences", {"preferences": [{"kind": "job.nope", "email": "maybe"},
                                                                     {"kind": "job.failed"}], "extra": 1},
              format="json")
    assert r.status_code == 400
    fields = r.json()["error"]["fields"]
    assert {"preferences.0.kind", "preferences.0.email", "preferences.1.email", "extra"} <= set(fields)
    assert fields["extra"][0]["code"] == "unknown_field"
    r = c.put("/api/v1/notifications/preferences", {"preferences": []}, format="json")
    assert r.status_code == 400 and "preferences.non_field_errors" in r.json()["error"]["fields"]
    r = c.post("/api/v1/notifications/webhooks", {"url": "ftp://x", "scope": "team", "kinds": ["no"], "secret": "s"},
               format="json")
    assert r.status_code == 400
    assert {"url", "scope", "kinds.0", "secret"} <= set(r.json()["error"]["fields"])
    r = client_for(lab.vadmin).put("/api/v1/notifications/department", {"budget_low_threshold": -1}, format="json")
    assert r.status_code == 400 and "budget_low_threshold" in r.json()["error"]["fields"]
    # larger than the database's integer holds: a field error, not a 500 from PostgreSQL
    r = client_for(lab.vadmin).put("/api/v1/notifications/department", {"budget_low_threshold": 10**19}, format="json")
    assert r.status_code == 400 and "budget_low_threshold" in r.json()["error"]["fields"]
    assert not Preference.objects.exists()


def test_webhooks_are_their_owners_and_department_webhooks_their_admins(lab, client_for):
    alice, amy, vadmin = client_for(lab.alice), client_for(lab.amy), client_for(lab.vadmin)
    mine = alice.post("/api/v1/notifications/webhooks", {"url": "https://hooks.example.org/a"}, format="json")
    assert mine.status_code == 201
    r = amy.post("/api/v1/notifications/webhooks", {"url": "https://hooks.example.org/k", "kinds": ["job.failed"]},
                 format="json")
    assert r.status_code == 400 and "kinds" in r.json()["error"]["fields"]  # preferences decide for a user's
    again = alice.post("/api/v1/notifications/webhooks", {"url": "https://hooks.example.org/b"}, format="json")
    assert again.status_code == 400 and "scope" in again.json()["error"]["fields"]
    r = alice.post("/api/v1/notifications/webhooks", {"url": "https://hooks.example.org/d", "scope": "department"},
                   format="json")
    assert r.status_code == 403  # a researcher cannot set the department's
    dept = vadmin.post("/api/v1/notifications/webhooks", {"url": "https://chat.example.org/hooks/x",
                                                          "scope": "department"}, format="json")
    assert dept.status_code == 201 and set(dept.json()["kinds"]) == {"approval.requested", "budget.low",
                                                                      "allowance.exhausted"}
    hid, did = mine.json()["id"], dept.json()["id"]
    assert [h["id"] for h in amy.get("/api/v1/notifications/webhooks").json()] == []
    assert amy.get(f"/api/v1/notifications/webhooks/{hid}").status_code == 404  # a colleague's: not even seen
    assert amy.patch(f"/api/v1/notifications/webhooks/{did}", {"active": False}, format="json").status_code == 404
    assert [h["id"] for h in vadmin.get("/api/v1/notifications/webhooks").json()] == [did]  # not alice's
    assert client_for(lab.nadmin).get(f"/api/v1/notifications/webhooks/{did}").status_code == 404
    r = vadmin.patch(f"/api/v1/notifications/webhooks/{did}", {"kinds": ["job.failed"], "active": False},
                     format="json")
    assert r.status_code == 200 and r.json()["kinds"] == ["job.failed"] and "secret" not in r.json()
    r = alice.patch(f"/api/v1/notifications/webhooks/{hid}", {"kinds": ["job.failed"]}, format="json")
    assert r.status_code == 400 and "kinds" in r.json()["error"]["fields"]
    assert alice.delete(f"/api/v1/notifications/webhooks/{hid}").status_code == 204
    assert alice.get("/api/v1/notifications/webhooks").json() == []


def test_a_users_notifications_are_their_own(lab, running_job, go, client_for, smtp_server):
    running_job(lab.alice)
    from scheduling.models import Job

    job = Job.objects.get()
    go(lifecycle.finish, job=job, state=JobState.FAILED, exit_code=1, reason="Error", message="boom",
       finished_at=None)
    assert [n["kind"] for n in client_for(lab.alice).get("/api/v1/notifications").json()["results"]] == ["job.failed"]
    for other in (lab.amy, lab.vadmin, lab.root, lab.bob):
        assert client_for(other).get("/api/v1/notifications").json()["results"] == []


# ------------------------------------------------------------------------------------------ unsubscribe


def _unsubscribe_path(mail) -> str:
    return re.search(r"https?://[^/]+(/notifications/unsubscribe/[^\s>]+/)", mail["body"]).group(1)


def test_the_unsubscribe_link_asks_then_turns_that_kind_off_without_logging_in(lab, running_job, go, client,
                                                                              smtp_server):
    job = running_job(lab.alice)
    go(lifecycle.finish, job=job, state=JobState.FAILED, exit_code=1, reason="Error", message="x", finished_at=None)
    path = _unsubscribe_path(smtp_server.messages[0])
    assert str(smtp_server.messages[0]["headers"]["List-Unsubscribe"]).strip() == f"<http://127.0.0.1:8000{path}>"
    page = client.get(path)  # a mail scanner following the link changes nothing
    assert page.status_code == 200 and b"Stop <strong>Job failed</strong>" in page.content
    assert not Preference.objects.exists()
    done = client.post(path)  # anonymous, no CSRF token: the signature is the credential
    assert done.status_code == 200 and b"Unsubscribed" in done.content
    p = Preference.objects.get(user=lab.alice, kind="job.failed")
    assert (p.email, p.webhook) == (False, True)  # only the e-mail of that kind
    job2 = running_job(lab.alice)
    go(lifecycle.finish, job=job2, state=JobState.FAILED, exit_code=1, reason="Error", message="x", finished_at=None)
    assert len(smtp_server.messages) == 1
    assert not Delivery.objects.filter(event__data__job_id=job2.pk).exists()


def test_a_tampered_unsubscribe_link_is_refused(lab, client):
    from notifications.services.preferences import unsubscribe_token

    token = unsubscribe_token(user_id=lab.alice.pk, kind="job.failed")
    forged = unsubscribe_token(user_id=lab.alice.pk, kind="job.failed").replace(str(lab.alice.pk), "x")
    payload, sig = token.rsplit(":", 1)[0], token.rsplit(":", 1)[1]
    for bad in (token[:-2] + ("AA" if not token.endswith("AA") else "BB"), payload + ":" + sig[::-1], "nonsense",
                forged if forged != token else "x:y:z"):
        r = client.post(f"/notifications/unsubscribe/{bad}/")
        assert r.status_code == 404 and b"not valid" in r.content
    from django.core import signing

    other_salt = signing.dumps({"u": lab.alice.pk, "k": "job.failed", "c": "email"}, salt="something-else")
    assert client.post(f"/notifications/unsubscribe/{other_salt}/").status_code == 404
    assert not Preference.objects.exists()


def test_the_preferences_page_saves_the_form(lab, client):
    client.force_login(lab.alice)
    page = client.get("/notifications/")
    assert page.status_code == 200 and b'name="email:job.failed" aria-label="Job failed by e-mail" checked' in page.content
    r = client.post("/notifications/", {"email:job.started": "on", "webhook:job.failed": "on"})
    assert r.status_code == 302
    prefs = {p.kind: (p.email, p.webhook) for p in Preference.objects.filter(user=lab.alice)}
    assert prefs["job.started"] == (True, False) and prefs["job.failed"] == (False, True)
    assert b"Notifications" in client.get("/").content  # linked from the navigation
