"""The lab's structure through the API: each role's allowed and forbidden actions on every new endpoint,
validation in the one error shape, nothing half-applied, every change audited."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry, Department, Membership
from quotas.models import Flavor, Quota, QuotaChangeRequest
from scheduling.models import Cluster, Job, JobState, Node

pytestmark = pytest.mark.django_db


def _fields(r):
    return r.json()["error"]["fields"]


# ------------------------------------------------------------------------------------------ departments


def test_platform_admin_creates_renames_archives_and_restores_a_department(lab, client_for):
    c = client_for(lab.root)
    r = c.post("/api/v1/departments", {"slug": "bio", "name": "Biology", "comment": "new group"}, format="json")
    assert r.status_code == 201 and r.json() == {"slug": "bio", "name": "Biology", "archived_at": None}
    assert AuditEntry.objects.get(action="department.create").comment == "new group"
    r = c.patch("/api/v1/departments/bio", {"name": "Life sciences"}, format="json")
    assert r.status_code == 200 and r.json()["name"] == "Life sciences"
    a = AuditEntry.objects.get(action="department.rename")
    assert (a.old, a.new) == ({"name": "Biology"}, {"name": "Life sciences"})
    impact = c.get("/api/v1/departments/bio/archive").json()
    assert impact["waiting_jobs"] == 0 and impact["text"]
    r = c.post("/api/v1/departments/bio/archive", {"reason": "group closed", "confirm": True}, format="json")
    assert r.status_code == 200 and Department.objects.get(slug="bio").archived_at is not None
    assert c.post("/api/v1/departments/bio/restore").status_code == 200
    assert Department.objects.get(slug="bio").archived_at is None


@pytest.mark.parametrize("who", ["vadmin", "alice", "nadmin"])
def test_only_platform_admins_create_rename_or_archive_departments(lab, client_for, who):
    c = client_for(getattr(lab, who))
    assert c.post("/api/v1/departments", {"slug": "bio", "name": "Bio"}, format="json").status_code == 403
    own_or_not = 403 if who in ("vadmin", "alice") else 404  # another department's: as if it did not exist
    assert c.patch("/api/v1/departments/vision", {"name": "x"}, format="json").status_code == own_or_not
    assert c.post("/api/v1/departments/vision/archive", {"reason": "x", "confirm": True},
                  format="json").status_code == own_or_not
    assert c.get("/api/v1/departments/vision/archive").status_code == own_or_not
    assert not Department.objects.filter(slug="bio").exists()
    assert Department.objects.get(slug="vision").name == "Vision" and not Department.objects.get(
        slug="vision").archived_at


def test_a_stranger_cannot_create_departments(lab, client_for):
    assert client_for(lab.stranger).post("/api/v1/departments", {"slug": "bio", "name": "B"},
                                         format="json").status_code == 403


@pytest.mark.parametrize(("slug", "code"), [("approvals", "reserved"), ("prices", "reserved"),
                                            ("allowances", "reserved"), ("Bad_Slug", "invalid"),
                                            ("vision", "unique")])
def test_bad_slugs_are_refused_in_the_error_shape(lab, client_for, slug, code):
    r = client_for(lab.root).post("/api/v1/departments", {"slug": slug, "name": "X"}, format="json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"
    assert _fields(r)["slug"][0]["code"] == code
    assert Department.objects.count() == 3


def test_unknown_fields_are_refused(lab, client_for):
    r = client_for(lab.root).post("/api/v1/departments", {"slug": "bio", "name": "B", "colour": "red"},
                                  format="json")
    assert r.status_code == 400 and _fields(r)["colour"][0]["code"] == "unknown_field"


def test_archiving_says_what_happens_and_needs_a_confirmation(lab, client_for, submit):
    queued = submit(lab.alice)
    running = submit(lab.alice, name="r")
    Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING, placement=["n0"])
    c = client_for(lab.root)
    r = c.post("/api/v1/departments/vision/archive", {"reason": "closed"}, format="json")
    assert r.status_code == 400
    body = r.json()["error"]
    assert body["detail"]["impact"]["waiting_jobs"] == 1 and body["detail"]["impact"]["active_jobs"] == 1
    assert "will be cancelled" in body["fields"]["confirm"][0]["message"]
    assert Department.objects.get(slug="vision").archived_at is None  # nothing happened
    r = c.post("/api/v1/departments/vision/archive", {"reason": "closed", "confirm": True}, format="json")
    assert r.status_code == 200 and r.json()["cancelled_job_ids"] == [queued.pk]
    queued.refresh_from_db()
    running.refresh_from_db()
    assert queued.state == JobState.CANCELLED and running.state == JobState.RUNNING
    # archived: history readable, no new jobs, no new members (a fresh user object, as a request loads it)
    alice = type(lab.alice).objects.get(pk=lab.alice.pk)
    r = client_for(alice).post("/api/v1/jobs", {"name": "x", "image": "i", "command": ["true"],
                                                    "flavor": "a100-80gb", "gpus": 1}, format="json")
    assert r.status_code == 403 and "archived" in r.json()["error"]["message"]
    assert client_for(alice).get(f"/api/v1/jobs/{queued.pk}").status_code == 200
    r = c.post("/api/v1/departments/vision/members", {"username": "newbie"}, format="json")
    assert r.status_code == 409
    assert c.post("/api/v1/departments/vision/archive", {"reason": "again", "confirm": True},
                  format="json").status_code == 409


# ------------------------------------------------------------------------------------------ members


def test_department_admin_manages_own_members(lab, client_for):
    c = client_for(lab.vadmin)
    r = c.post("/api/v1/departments/vision/members", {"username": "newbie", "email": "n@x.test",
                                                      "user_tier": "senior"}, format="json")
    assert r.status_code == 201 and r.json()["role"] == "researcher" and r.json()["user_tier"] == "senior"
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.get(username="newbie").has_usable_password()
    r = c.patch("/api/v1/departments/vision/members/newbie", {"role": "department_admin", "user_tier": "pi"},
                format="json")
    assert r.status_code == 200 and (r.json()["role"], r.json()["user_tier"]) == ("department_admin", "pi")
    a = AuditEntry.objects.get(action="membership.change")
    assert a.old["role"] == "researcher" and a.new["role"] == "department_admin" and a.actor == lab.vadmin
    assert c.delete("/api/v1/departments/vision/members/newbie").status_code == 204
    assert not Membership.objects.filter(user__username="newbie").exists()
    assert AuditEntry.objects.filter(action="membership.remove", department=lab.vision).exists()
    assert [m["username"] for m in c.get("/api/v1/departments/vision/members").json()] == ["alice", "amy",
                                                                                           "vadmin"]


def test_department_admin_cannot_grant_platform_admin_or_touch_other_departments(lab, client_for):
    c = client_for(lab.vadmin)
    r = c.post("/api/v1/departments/vision/members", {"username": "x", "role": "platform_admin"}, format="json")
    assert r.status_code == 403
    assert c.patch("/api/v1/departments/vision/members/alice", {"role": "platform_admin"},
                   format="json").status_code == 403
    assert c.patch("/api/v1/departments/vision/members/vadmin", {"role": "researcher"},
                   format="json").status_code == 403  # not themselves
    assert c.delete("/api/v1/departments/vision/members/vadmin").status_code == 403
    assert c.post("/api/v1/departments/nlp/members", {"username": "x"}, format="json").status_code == 404
    assert c.patch("/api/v1/departments/nlp/members/bob", {"user_tier": "pi"}, format="json").status_code == 404
    assert c.delete("/api/v1/departments/nlp/members/bob").status_code == 404
    assert Membership.objects.get(user=lab.alice).role == "researcher"
    assert Membership.objects.get(user=lab.bob).user_tier == "standard"


def test_researchers_read_members_but_change_nothing(lab, client_for):
    c = client_for(lab.alice)
    assert c.get("/api/v1/departments/vision/members").status_code == 200
    assert c.post("/api/v1/departments/vision/members", {"username": "x"}, format="json").status_code == 403
    assert c.patch("/api/v1/departments/vision/members/amy", {"user_tier": "pi"}, format="json").status_code == 403
    assert c.delete("/api/v1/departments/vision/members/amy").status_code == 403
    assert c.get("/api/v1/departments/nlp/members").status_code == 404


def test_member_input_errors_are_listed_and_nothing_is_created(lab, client_for):
    c = client_for(lab.root)
    r = c.post("/api/v1/departments/vision/members", {"username": "", "role": "boss", "user_tier": "gold"},
               format="json")
    assert r.status_code == 400 and {"username", "role", "user_tier"} <= set(_fields(r))
    r = c.post("/api/v1/departments/vision/members", {"username": "bob"}, format="json")
    assert r.status_code == 400 and _fields(r)["username"][0]["code"] == "member_elsewhere"
    assert Membership.objects.get(user=lab.bob).department == lab.nlp


def test_platform_admin_grants_platform_admin(lab, client_for):
    r = client_for(lab.root).patch("/api/v1/departments/vision/members/alice", {"role": "platform_admin"},
                                   format="json")
    assert r.status_code == 200 and r.json()["role"] == "platform_admin"


# ------------------------------------------------------------------------------------------ flavors


def test_platform_admin_manages_flavors_including_mig_profiles(lab, client_for):
    c = client_for(lab.root)
    r = c.post("/api/v1/flavors", {"name": "h100-mig-1g.10gb", "resource_name": "nvidia.com/mig-1g.10gb",
                                   "node_labels": {"gpu-type": "h100"}, "gpu_memory_gib": 10}, format="json")
    assert r.status_code == 201 and r.json()["is_mig"] is True and r.json()["total_gpus"] == 0
    r = c.patch("/api/v1/flavors/h100-mig-1g.10gb", {"description": "one seventh of an H100"}, format="json")
    assert r.status_code == 200 and r.json()["description"] == "one seventh of an H100"
    assert c.delete("/api/v1/flavors/h100-mig-1g.10gb").status_code == 204
    assert c.delete("/api/v1/flavors/a100-80gb").status_code == 409  # nodes and quotas use it
    assert [a.action for a in AuditEntry.objects.order_by("id")] == ["flavor.create", "flavor.update",
                                                                       "flavor.delete"]


@pytest.mark.parametrize("who", ["vadmin", "alice"])
def test_only_platform_admins_change_flavors(lab, client_for, who):
    c = client_for(getattr(lab, who))
    assert c.get("/api/v1/flavors").status_code == 200
    assert c.post("/api/v1/flavors", {"name": "x"}, format="json").status_code == 403
    assert c.patch("/api/v1/flavors/a100-80gb", {"description": "x"}, format="json").status_code == 403
    assert c.delete("/api/v1/flavors/a100-80gb").status_code == 403
    assert Flavor.objects.get(name="a100-80gb").description == ""


def test_bad_flavors_are_refused(lab, client_for):
    r = client_for(lab.root).post("/api/v1/flavors", {"name": "A100!", "resource_name": "not a resource",
                                                      "gpu_memory_gib": -1}, format="json")
    assert r.status_code == 400 and {"name", "resource_name", "gpu_memory_gib"} <= set(_fields(r))
    r = client_for(lab.root).post("/api/v1/flavors", {"name": "a100-80gb"}, format="json")
    assert r.status_code == 400 and _fields(r)["name"][0]["code"] == "unique"


# ------------------------------------------------------------------------------------------ clusters


def test_platform_admin_manages_clusters_and_node_groups(lab, client_for):
    c = client_for(lab.root)
    assert c.post("/api/v1/clusters", {"name": "edge"}, format="json").status_code == 201
    r = c.put("/api/v1/clusters/edge/node-groups/mig", {"flavor": "a100-mig-3g.40gb", "nodes": 3,
                                                        "gpus_per_node": 7}, format="json")
    assert r.status_code == 200 and r.json()["nodes"] == 3
    assert sorted(Node.objects.filter(cluster__name="edge").values_list("name", flat=True)) == ["mig-0", "mig-1",
                                                                                                "mig-2"]
    r = c.put("/api/v1/clusters/edge/node-groups/mig", {"flavor": "a100-mig-3g.40gb", "nodes": 1,
                                                        "gpus_per_node": 7}, format="json")
    assert r.status_code == 200 and Node.objects.filter(cluster__name="edge").count() == 1
    assert c.get("/api/v1/clusters/edge").json()["node_groups"] == [
        {"name": "mig", "flavor": "a100-mig-3g.40gb", "nodes": 1, "gpus_per_node": 7,
         "labels": {"gpu-type": "a100-mig"}}]
    assert c.delete("/api/v1/clusters/edge/node-groups/mig").status_code == 204
    assert c.patch("/api/v1/clusters/edge", {"is_default": True}, format="json").status_code == 200
    assert Cluster.objects.get(is_default=True).name == "edge"
    assert c.delete("/api/v1/clusters/edge").status_code == 409  # the default: make another one default first
    assert c.patch("/api/v1/clusters/default", {"is_default": True}, format="json").status_code == 200
    assert c.delete("/api/v1/clusters/edge").status_code == 204
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"cluster.create", "node_group.set", "cluster.update", "cluster.delete"} <= actions


def test_nodes_a_job_runs_on_are_not_removed(lab, client_for, submit):
    c = client_for(lab.root)
    c.put("/api/v1/clusters/default/node-groups/big", {"flavor": "a100-80gb", "nodes": 2, "gpus_per_node": 8},
          format="json")
    job = submit(lab.alice)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, placement=["big-1"])
    r = c.put("/api/v1/clusters/default/node-groups/big", {"flavor": "a100-80gb", "nodes": 1,
                                                           "gpus_per_node": 8}, format="json")
    assert r.status_code == 409 and "big-1" in r.json()["error"]["message"]
    assert Node.objects.filter(name__startswith="big-").count() == 2


def test_a_kubernetes_cluster_refuses_node_groups(lab, client_for):
    c = client_for(lab.root)
    assert c.post("/api/v1/clusters", {"name": "k8s", "backend": "kubernetes"}, format="json").status_code == 201
    r = c.put("/api/v1/clusters/k8s/node-groups/a", {"flavor": "a100-80gb", "nodes": 1, "gpus_per_node": 8},
              format="json")
    assert r.status_code == 400 and _fields(r)["cluster"][0]["code"] == "inventory_owned"
    assert c.get("/api/v1/clusters/k8s").json()["inventory_owned"] is True


@pytest.mark.parametrize("who", ["vadmin", "alice", "stranger"])
def test_only_platform_admins_see_or_change_clusters(lab, client_for, who):
    c = client_for(getattr(lab, who))
    listed = c.get("/api/v1/clusters")
    if who == "stranger":
        assert listed.status_code == 403
    else:  # members see what they need to write a cluster selector, and nothing of how a cluster is reached
        assert listed.status_code == 200
        assert listed.json() == [{"name": "default", "labels": {}, "topology_levels": [], "state": "active",
                                  "is_default": True, "reachable": True}]
    assert c.post("/api/v1/clusters", {"name": "x"}, format="json").status_code == 403
    assert c.get("/api/v1/clusters/default").status_code == 403
    assert c.put("/api/v1/clusters/default/node-groups/g", {"flavor": "a100-80gb", "nodes": 1,
                                                            "gpus_per_node": 1}, format="json").status_code == 403
    assert c.delete("/api/v1/clusters/default").status_code == 403
    assert Cluster.objects.count() == 1 and Node.objects.count() == 2


def test_bad_node_groups_list_every_error(lab, client_for):
    r = client_for(lab.root).put("/api/v1/clusters/default/node-groups/g", {"flavor": "a100-80gb", "nodes": -1,
                                                                            "gpus_per_node": 0, "x": 1},
                                 format="json")
    assert r.status_code == 400 and {"nodes", "gpus_per_node", "x"} <= set(_fields(r))


# ------------------------------------------------------------------------------------------ quotas


def test_quotas_over_capacity_need_oversubscribe(lab, client_for):
    c = client_for(lab.root)
    r = c.post("/api/v1/quotas", {"department": "platform", "flavor": "a100-80gb", "nominal": 1}, format="json")
    assert r.status_code == 400 and _fields(r)["nominal"][0]["code"] == "over_capacity"  # 4 + 4 + 1 > 8
    assert not Quota.objects.filter(department=lab.platform).exists()
    r = c.post("/api/v1/quotas", {"department": "platform", "flavor": "a100-80gb", "nominal": 1,
                                  "oversubscribe": True, "comment": "burst week"}, format="json")
    assert r.status_code == 201 and r.json()["warnings"]
    a = AuditEntry.objects.get(action="quota.create")
    assert a.new["oversubscribed"] is True and a.comment.startswith("burst week")
    q = Quota.objects.get(department=lab.platform)
    assert c.delete(f"/api/v1/quotas/{q.pk}").status_code == 204


def test_quota_rules_are_checked_together(lab, client_for):
    q = Quota.objects.get(department=lab.vision)
    r = client_for(lab.root).patch(f"/api/v1/quotas/{q.pk}", {"nominal": 2, "lending_limit": 3,
                                                              "borrowing_limit": -1}, format="json")
    assert r.status_code == 400 and {"borrowing_limit"} <= set(_fields(r))
    r = client_for(lab.root).patch(f"/api/v1/quotas/{q.pk}", {"nominal": 2, "lending_limit": 3}, format="json")
    assert r.status_code == 400 and _fields(r)["lending_limit"][0]["code"] == "exceeds_nominal"
    q.refresh_from_db()
    assert q.nominal == 4


@pytest.mark.parametrize("who", ["vadmin", "alice"])
def test_only_platform_admins_create_or_delete_quotas(lab, client_for, who):
    c = client_for(getattr(lab, who))
    q = Quota.objects.get(department=lab.vision)
    assert c.post("/api/v1/quotas", {"department": "vision", "flavor": "a100-mig-3g.40gb", "nominal": 0},
                  format="json").status_code == 403
    assert c.delete(f"/api/v1/quotas/{q.pk}").status_code == 403
    assert Quota.objects.count() == 2


def test_department_admin_requests_and_platform_admin_approves(lab, client_for):
    q = Quota.objects.get(department=lab.nlp)
    client_for(lab.root).patch(f"/api/v1/quotas/{q.pk}", {"nominal": 2}, format="json")
    c = client_for(lab.vadmin)
    r = c.post("/api/v1/quota-requests", {"department": "vision", "flavor": "a100-80gb", "nominal": 6,
                                          "lending_limit": 2, "reason": "paper deadline"}, format="json")
    assert r.status_code == 201 and r.json()["state"] == "pending"
    pk = r.json()["id"]
    assert c.post(f"/api/v1/quota-requests/{pk}/approve", {}, format="json").status_code == 403
    assert client_for(lab.nadmin).get(f"/api/v1/quota-requests/{pk}").status_code == 404
    assert client_for(lab.alice).get("/api/v1/quota-requests").json()["results"] == []  # admins' business
    assert [x["id"] for x in c.get("/api/v1/quota-requests").json()["results"]] == [pk]
    r = client_for(lab.root).post(f"/api/v1/quota-requests/{pk}/approve", {"comment": "ok"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "approved" and r.json()["decided_by"] == "root"
    assert Quota.objects.get(department=lab.vision).nominal == 6
    a = AuditEntry.objects.filter(action="quota.set", department=lab.vision).get()
    assert "paper deadline" in a.comment and a.actor == lab.root
    assert client_for(lab.root).post(f"/api/v1/quota-requests/{pk}/reject", {},
                                     format="json").status_code == 409  # decided once


def test_a_request_that_could_never_be_approved_is_refused_when_filed(lab, client_for):
    r = client_for(lab.vadmin).post("/api/v1/quota-requests", {"department": "vision", "flavor": "a100-80gb",
                                                               "nominal": 6, "reason": "more"}, format="json")
    # nlp holds 4 of the 8 installed GPUs: 6 more can never fit, whoever approves it
    assert r.status_code == 400 and _fields(r)["nominal"][0]["code"] == "over_capacity"
    assert "The other departments hold 4 of the 8: ask for at most 4" in _fields(r)["nominal"][0]["message"]
    assert not QuotaChangeRequest.objects.exists()
    assert not AuditEntry.objects.filter(action="quota_request.create").exists()


def test_a_request_that_asks_to_oversubscribe_is_filed_and_approved_as_asked(lab, client_for):
    r = client_for(lab.vadmin).post("/api/v1/quota-requests", {"department": "vision", "flavor": "a100-80gb",
                                                               "nominal": 6, "oversubscribe": True,
                                                               "reason": "burst"}, format="json")
    assert r.status_code == 201, r.json()
    r = client_for(lab.root).post(f"/api/v1/quota-requests/{r.json()['id']}/approve", {}, format="json")
    assert r.status_code == 200 and Quota.objects.get(department=lab.vision).nominal == 6


def test_an_approval_that_no_longer_fits_is_refused_and_the_request_stays_pending(lab, client_for):
    r = client_for(lab.vadmin).post("/api/v1/quota-requests", {"department": "vision", "flavor": "a100-80gb",
                                                               "nominal": 4, "lending_limit": 0,
                                                               "reason": "lend nothing"}, format="json")
    assert r.status_code == 201, r.json()
    pk = r.json()["id"]
    Node.objects.filter(name="n1").update(schedulable=False)  # 4 GPUs leave before it is decided
    r = client_for(lab.root).post(f"/api/v1/quota-requests/{pk}/approve", {}, format="json")
    assert r.status_code == 400 and _fields(r)["nominal"][0]["code"] == "over_capacity"
    assert QuotaChangeRequest.objects.get(pk=pk).state == "pending"
    assert Quota.objects.get(department=lab.vision).nominal == 4
    r = client_for(lab.root).post(f"/api/v1/quota-requests/{pk}/reject", {"comment": "no room"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "rejected"


def test_quota_requests_are_for_own_department_and_need_a_reason(lab, client_for):
    c = client_for(lab.vadmin)
    r = c.post("/api/v1/quota-requests", {"department": "nlp", "flavor": "a100-80gb", "nominal": 1,
                                          "reason": "x"}, format="json")
    assert r.status_code == 404
    r = c.post("/api/v1/quota-requests", {"department": "vision", "flavor": "nope", "nominal": 1, "reason": ""},
               format="json")
    assert r.status_code == 400 and "reason" in _fields(r)
    assert client_for(lab.alice).post("/api/v1/quota-requests", {"department": "vision", "flavor": "a100-80gb",
                                                                 "nominal": 1, "reason": "x"},
                                      format="json").status_code == 403
    assert not QuotaChangeRequest.objects.exists()
