"""The lab pages: each role's allowed and forbidden actions, form errors (400, nothing saved), the what-if
link of a quota change."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client

from portal.models import Department, Membership
from quotas.models import Flavor, Quota, QuotaChangeRequest
from scheduling.models import Cluster, Node

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_platform_admin_creates_a_department_on_the_lab_page(lab):
    c = _client(lab.root)
    assert c.get("/lab/").status_code == 200
    r = c.post("/lab/", {"slug": "bio", "name": "Biology"})
    assert r.status_code == 302 and Department.objects.filter(slug="bio").exists()
    r = c.post("/lab/", {"slug": "approvals", "name": ""})
    assert r.status_code == 400 and b"Nothing was saved" in r.content
    assert b"portal&#x27;s URLs use" in r.content or b"portal's URLs use" in r.content
    assert not Department.objects.filter(slug="approvals").exists()


@pytest.mark.parametrize("who", ["vadmin", "alice"])
def test_others_land_on_their_department_and_cannot_create(lab, who):
    c = _client(getattr(lab, who))
    r = c.get("/lab/")
    assert r.status_code == 302 and r["Location"] == "/lab/departments/vision/"
    assert c.post("/lab/", {"slug": "bio", "name": "B"}).status_code == 403
    assert not Department.objects.filter(slug="bio").exists()


def test_department_admin_adds_changes_and_removes_members(lab):
    c = _client(lab.vadmin)
    page = c.get("/lab/departments/vision/")
    assert page.status_code == 200 and b"Add a member" in page.content
    assert b'value="platform_admin"' not in page.content  # not a role a department admin can give
    r = c.post("/lab/departments/vision/", {"action": "add", "username": "newbie", "email": "newbie@x.test",
                                            "role": "researcher", "user_tier": "pi"})
    assert r.status_code == 302 and Membership.objects.get(user__username="newbie").user_tier == "pi"
    r = c.post("/lab/departments/vision/members/newbie", {"role": "department_admin", "user_tier": "senior"})
    assert r.status_code == 302
    assert Membership.objects.get(user__username="newbie").role == "department_admin"
    assert c.post("/lab/departments/vision/members/newbie/remove").status_code == 302
    assert not Membership.objects.filter(user__username="newbie").exists()


def test_member_form_errors_rerender_with_400(lab):
    c = _client(lab.vadmin)
    r = c.post("/lab/departments/vision/", {"action": "add", "username": "bob", "role": "researcher",
                                            "user_tier": "standard"})
    assert r.status_code == 400 and b"member of another department" in r.content
    r = c.post("/lab/departments/vision/members/alice", {"role": "platform_admin", "user_tier": "standard"})
    assert r.status_code == 403
    assert Membership.objects.get(user=lab.alice).role == "researcher"


def test_researchers_see_members_but_no_forms(lab):
    c = _client(lab.alice)
    page = c.get("/lab/departments/vision/")
    assert page.status_code == 200 and b"Add a member" not in page.content and b"amy" in page.content
    assert c.post("/lab/departments/vision/", {"action": "add", "username": "x", "role": "researcher",
                                               "user_tier": "standard"}).status_code == 403
    assert c.post("/lab/departments/vision/members/amy", {"role": "researcher",
                                                          "user_tier": "pi"}).status_code == 403
    assert c.post("/lab/departments/vision/members/amy/remove").status_code == 403
    assert c.get("/lab/departments/vision/quota").status_code == 403
    assert c.get("/lab/quota-requests/").status_code == 403
    assert Membership.objects.filter(department=lab.vision).count() == 3


def test_other_departments_are_not_found(lab):
    c = _client(lab.nadmin)
    for url in ("/lab/departments/vision/", "/lab/departments/vision/quota", "/lab/departments/vision/archive"):
        assert c.get(url).status_code == 404
    assert c.post("/lab/departments/vision/members/alice/remove").status_code == 404


def test_archive_page_shows_the_impact_and_needs_the_checkbox(lab, submit):
    submit(lab.alice)
    c = _client(lab.root)
    page = c.get("/lab/departments/vision/archive")
    assert page.status_code == 200 and b"1 waiting job(s)" in page.content
    r = c.post("/lab/departments/vision/archive", {"reason": "closing"})
    assert r.status_code == 400 and Department.objects.get(slug="vision").archived_at is None
    r = c.post("/lab/departments/vision/archive", {"reason": "closing", "confirm": "on"})
    assert r.status_code == 302 and Department.objects.get(slug="vision").archived_at is not None
    assert b"Archived on" in c.get("/lab/departments/vision/").content
    assert _client(lab.vadmin).get("/lab/departments/vision/archive").status_code == 403


def test_platform_admin_sets_a_quota_with_a_visible_oversubscription_warning(lab):
    c = _client(lab.root)
    r = c.post("/lab/departments/vision/quota", {"flavor": "a100-80gb", "nominal": "6", "borrowing_unlimited": "on",
                                                 "lending_all": "on", "reason": "burst"})
    assert r.status_code == 400 and b"oversubscribe" in r.content
    assert b'id="whatif-link"' in r.content  # the change can be replayed before it is forced
    assert Quota.objects.get(department=lab.vision).nominal == 4
    r = c.post("/lab/departments/vision/quota", {"flavor": "a100-80gb", "nominal": "6", "borrowing_unlimited": "on",
                                                 "lending_all": "on", "reason": "burst", "oversubscribe": "on"},
               follow=True)
    assert r.status_code == 200 and b"oversubscribed" in r.content
    assert Quota.objects.get(department=lab.vision).nominal == 6


def test_department_admin_files_a_request_and_the_platform_admin_approves_it(lab):
    c = _client(lab.vadmin)
    page = c.get("/lab/departments/vision/quota?flavor=a100-80gb&nominal=3")
    link = page.context["whatif"]
    query = parse_qs(urlparse(link).query)
    assert query["quota:vision:a100-80gb:nominal"] == ["3"]
    whatif = c.get(link)
    assert whatif.status_code == 200 and b'name="quota:vision:a100-80gb:nominal" value="3"' in whatif.content
    r = c.post("/lab/departments/vision/quota", {"flavor": "a100-80gb", "nominal": "3", "borrowing_limit": "2",
                                                 "lending_all": "on", "reason": "fewer jobs"})
    assert r.status_code == 302
    req = QuotaChangeRequest.objects.get()
    assert Quota.objects.get(department=lab.vision).nominal == 4  # not applied by asking
    assert c.post(f"/lab/quota-requests/{req.pk}/approve").status_code == 403
    assert _client(lab.nadmin).post(f"/lab/quota-requests/{req.pk}/approve").status_code == 404
    root = _client(lab.root)
    assert b"fewer jobs" in root.get("/lab/quota-requests/").content
    assert root.post(f"/lab/quota-requests/{req.pk}/approve", {"comment": "fine"}).status_code == 302
    assert Quota.objects.get(department=lab.vision).nominal == 3
    assert QuotaChangeRequest.objects.get().state == "approved"


def test_the_quota_form_shows_what_the_other_departments_hold_and_what_is_left(lab):
    from scheduling.models import Cluster, Node

    east = Cluster.objects.create(name="east", backend="simulated")
    Node.objects.create(cluster=east, name="e0", flavor=lab.a100, gpus=2, labels={"gpu-type": "a100"})
    Quota.objects.create(department=lab.nlp, flavor=lab.a100, cluster=east, nominal=1)
    Quota.objects.filter(department=lab.nlp, cluster=None).update(nominal=3)
    page = _client(lab.vadmin).get("/lab/departments/vision/quota?flavor=a100-80gb").content.decode()
    # 10 a100s in all, nlp holds 3 of them: 7 left; on east, nlp holds 1 of 2: 1 left
    row = page.split('data-scope="a100-80gb"')[1].split("</tr>")[0]
    assert '<td data-col="others">3</td><td data-col="left">7</td>' in row
    assert "nominal quotas here come to 3 of 10 installed GPUs: 7 left to ask for without oversubscribing." in page
    east_page = _client(lab.vadmin).get("/lab/departments/vision/quota?flavor=a100-80gb&cluster=east")
    assert "come to 1 of 2 installed GPUs: 1 left to ask for" in east_page.content.decode()
    assert east_page.context["room"]["a100-80gb@east"] == {"capacity": 2, "others": 1, "left": 1}


def test_a_request_above_what_is_left_is_refused_on_the_form_and_nothing_is_filed(lab):
    r = _client(lab.vadmin).post("/lab/departments/vision/quota", {
        "flavor": "a100-80gb", "nominal": "5", "borrowing_limit": "2", "lending_all": "on", "reason": "more"})
    assert r.status_code == 400 and not QuotaChangeRequest.objects.exists()
    assert "ask for at most 4, or ask to oversubscribe" in r.context["errors"]["nominal"][0]
    assert 'data-error-for="nominal"' in r.content.decode()


def test_quota_request_form_errors(lab):
    r = _client(lab.vadmin).post("/lab/departments/vision/quota", {"flavor": "a100-80gb", "nominal": "x",
                                                                    "lending_limit": "9", "reason": ""})
    assert r.status_code == 400 and not QuotaChangeRequest.objects.exists()


def test_flavor_and_cluster_pages_are_for_platform_admins(lab):
    for who in ("vadmin", "alice"):
        c = _client(getattr(lab, who))
        assert c.get("/lab/flavors/").status_code == 403
        assert c.get("/lab/clusters/").status_code == 403
        assert c.post("/lab/flavors/", {"name": "x"}).status_code == 403
        assert c.post("/lab/clusters/", {"action": "cluster", "name": "x"}).status_code == 403
        assert c.post("/lab/flavors/a100-80gb/delete").status_code == 403
    c = _client(lab.root)
    r = c.post("/lab/flavors/", {"name": "h100-mig-1g.10gb", "resource_name": "nvidia.com/mig-1g.10gb",
                                 "node_labels": "gpu-type=h100", "gpu_memory_gib": "10"})
    assert r.status_code == 302 and Flavor.objects.get(name="h100-mig-1g.10gb").is_mig
    r = c.post("/lab/flavors/", {"name": "h100", "node_labels": "no-equals-sign"})
    assert r.status_code == 400 and not Flavor.objects.filter(name="h100").exists()
    r = c.post("/lab/clusters/", {"action": "node_group", "cluster": "default", "group": "mig",
                                  "flavor": "h100-mig-1g.10gb", "nodes": "2", "gpus_per_node": "7"})
    assert r.status_code == 302 and Node.objects.filter(name__startswith="mig-").count() == 2
    assert b"mig" in c.get("/lab/clusters/").content
    r = c.post("/lab/clusters/", {"action": "node_group", "cluster": "default", "group": "Bad Name",
                                  "flavor": "h100-mig-1g.10gb", "nodes": "2", "gpus_per_node": "0"})
    assert r.status_code == 400
    assert c.post("/lab/clusters/default/node-groups/mig/delete").status_code == 302
    assert not Node.objects.filter(name__startswith="mig-").exists()
    r = c.post("/lab/clusters/", {"action": "cluster", "name": "edge", "backend": "simulated"})
    assert r.status_code == 302 and Cluster.objects.filter(name="edge").exists()


def test_the_nav_links_the_lab_for_admins_only(lab):
    assert b'href="/lab/"' in _client(lab.vadmin).get("/").content
    assert b'href="/lab/"' not in _client(lab.alice).get("/").content


def test_the_quota_form_opens_with_the_quota_in_force_and_a_blank_lending_limit_is_refused(lab):
    Quota.objects.filter(department=lab.nlp).update(nominal=2)  # room for vision's 5
    quota = Quota.objects.get(department=lab.vision)
    Quota.objects.filter(pk=quota.pk).update(nominal=4, borrowing_limit=2, lending_limit=4)
    c = _client(lab.vadmin)
    # the general "Request a quota change" button: no flavor in the query, yet the form shows what is in force
    values = c.get("/lab/departments/vision/quota").context["values"]
    assert {k: values[k] for k in ("flavor", "nominal", "borrowing_limit", "lending_limit")} == {
        "flavor": "a100-80gb", "nominal": "4", "borrowing_limit": "2", "lending_limit": "4"}
    assert "lending_all" not in values
    # a blank lending limit was "all": asking for one more GPU removed a lending limit of 4 on approval
    r = c.post("/lab/departments/vision/quota", {"flavor": "a100-80gb", "nominal": "5", "borrowing_limit": "2",
                                                 "lending_limit": "", "reason": "one more GPU"})
    assert r.status_code == 400 and not QuotaChangeRequest.objects.exists()
    assert 'data-error-for="lending_limit">Give a lending limit, or tick &quot;lend all&quot;' in r.content.decode()
    r = c.post("/lab/departments/vision/quota", {"flavor": "a100-80gb", "nominal": "5", "borrowing_limit": "2",
                                                 "lending_limit": "3", "lending_all": "on", "reason": "x"})
    assert r.status_code == 400 and "not both" in r.context["errors"]["lending_limit"][0]
    # the prefilled form, one number changed: lending stays 4
    assert c.post("/lab/departments/vision/quota", {**values, "nominal": "5", "reason": "one more GPU"}
                  ).status_code == 302
    assert QuotaChangeRequest.objects.get().lending_limit == 4
    page = _client(lab.root).get("/lab/quota-requests/").content.decode()
    assert 'data-limit="lending">lending 4 → <strong>4</strong></div>' in page


def test_a_quota_without_limits_opens_with_no_limit_ticked(lab):
    Quota.objects.filter(department=lab.vision).update(borrowing_limit=None, lending_limit=None)
    values = _client(lab.root).get("/lab/departments/vision/quota?flavor=a100-80gb").context["values"]
    assert (values["borrowing_unlimited"], values["lending_all"], values["lending_limit"]) == ("on", "on", "")


def test_the_quota_inbox_shows_what_a_request_changes_and_flags_a_lending_limit_it_would_remove(lab):
    Quota.objects.filter(department=lab.nlp).update(nominal=2)  # room for vision's 5
    quota = Quota.objects.get(department=lab.vision)
    Quota.objects.filter(pk=quota.pk).update(borrowing_limit=2, lending_limit=4)
    # "lend all" is a choice the requester ticks; the approver still sees that it widens the limit
    r = _client(lab.vadmin).post("/lab/departments/vision/quota", {
        "flavor": "a100-80gb", "nominal": "5", "borrowing_limit": "2", "lending_all": "on", "reason": "one more GPU"})
    assert r.status_code == 302
    page = _client(lab.root).get("/lab/quota-requests/").content.decode()
    assert "nominal 4 → <strong>5</strong>" in page
    assert 'class="widens" data-limit="lending">lending 4 → <strong>all</strong> (widens)' in page
    assert "It widens a limit: lending 4 → all." in page  # in the approval's confirmation too
