"""Nobody approves their own job, and a job waiting for approval says who will decide: its department's other
admins, or the platform admins when there are none."""

from __future__ import annotations

import pytest

from notifications.models import Event
from portal.models import Membership
from quotas.services import rules
from scheduling.models import JobState

pytestmark = pytest.mark.django_db


def test_a_department_admin_cannot_approve_her_own_job(lab, submit, go, client_for, client):
    rules.approval_rule_set(department=lab.vision, actor=lab.vadmin, gpus_above=1)
    job = go(submit, lab.vadmin, name="mine", gpus=2)
    assert job.state == JobState.PENDING_APPROVAL
    # vision has no other admin: a platform admin decides, and the job says so
    assert "decided by a platform admin (vision has no other department admin)" in job.reason_message
    assert Event.objects.get(kind="approval.requested").user_ids == [lab.root.pk]
    r = client_for(lab.vadmin).post(f"/api/v1/approvals/{job.pk}/approve", {"comment": ""}, format="json")
    assert r.status_code == 403, r.content
    assert "You cannot approve your own job: a platform admin" in r.json()["error"]["message"]
    job.refresh_from_db()
    assert job.state == JobState.PENDING_APPROVAL
    # the inbox page shows it as hers, without an Approve button
    client.force_login(lab.vadmin)
    page = client.get("/budgets/approvals/").content.decode()
    assert "Your own job: another admin decides." in page and f"/budgets/approvals/{job.pk}/approve" not in page
    # a platform admin approves it
    r = client_for(lab.root).post(f"/api/v1/approvals/{job.pk}/approve", {"comment": "ok"}, format="json")
    assert r.status_code == 200, r.content


def test_a_researcher_s_job_names_the_department_admins(lab, submit, go):
    rules.approval_rule_set(department=lab.vision, actor=lab.vadmin, gpus_above=1)
    job = go(submit, lab.alice, name="big", gpus=2)
    assert job.reason_message.endswith("(decided by a department admin of vision)")
    assert Event.objects.get(kind="approval.requested").user_ids == [lab.vadmin.pk]


def test_a_department_without_admin_falls_to_the_platform_admins(lab, submit, go):
    Membership.objects.filter(user=lab.nadmin).delete()
    rules.approval_rule_set(department=lab.nlp, actor=lab.root, gpus_above=1)
    job = go(submit, lab.bob, name="big", gpus=2)
    assert "decided by a platform admin (nlp has no other department admin)" in job.reason_message
    assert Event.objects.get(kind="approval.requested").user_ids == [lab.root.pk]
