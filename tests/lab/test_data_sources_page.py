"""The lab's data-sources page: members list what their department may mount; department admins declare and
delete their department's sources through the API's serializer and service (same errors, same audit)."""

from __future__ import annotations

import pytest
from django.test import Client

from portal.models import AuditEntry
from workloads.models import DataSource

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def sources(lab):
    own = DataSource.objects.create(name="vision-scratch", cluster=lab.cluster, department=lab.vision,
                                    claim_name="vision-scratch", writable=True)
    shared = DataSource.objects.create(name="imagenet", kind="dataset", cluster=lab.cluster, claim_name="imagenet",
                                       shared_with_all=True)
    other = DataSource.objects.create(name="nlp-corpus", cluster=lab.cluster, department=lab.nlp,
                                      claim_name="nlp-corpus")
    return own, shared, other


def test_a_member_lists_own_and_shared_sources_but_not_another_departments(lab, sources):
    r = _client(lab.alice).get("/lab/data-sources/")
    assert r.status_code == 200
    assert b'data-source="vision-scratch"' in r.content and b'data-source="imagenet"' in r.content
    assert b"nlp-corpus" not in r.content
    assert b"Declare a data source" not in r.content and b"Delete" not in r.content  # a researcher changes nothing


def test_a_department_admin_sees_delete_only_for_their_departments_sources(lab, sources):
    own, shared, _ = sources
    r = _client(lab.vadmin).get("/lab/data-sources/")
    assert r.status_code == 200 and b"Declare a data source" in r.content
    assert f"/lab/data-sources/{own.pk}/delete".encode() in r.content
    assert f"/lab/data-sources/{shared.pk}/delete".encode() not in r.content  # platform-owned


def test_the_lab_pages_link_the_data_sources_page(lab):
    assert b'href="/lab/data-sources/"' in _client(lab.root).get("/lab/").content
    assert b'href="/lab/data-sources/"' in _client(lab.vadmin).get("/lab/departments/vision/").content


def test_a_department_admin_declares_a_source_of_their_department(lab, sources):
    r = _client(lab.vadmin).post("/lab/data-sources/", {
        "name": "vision-images", "cluster": "default", "kind": "pvc", "claim_name": "images",
        "shared_with": "nlp", "writable": "on", "description": "raw images",
        "department": "nlp"})  # not theirs to choose: a department admin declares their own department's
    assert r.status_code == 302 and r["Location"] == "/lab/data-sources/"
    s = DataSource.objects.get(name="vision-images")
    assert (s.department, s.cluster, s.claim_name, s.writable, s.description) == (
        lab.vision, lab.cluster, "images", True, "raw images")
    assert [d.slug for d in s.shared_with.all()] == ["nlp"] and not s.shared_with_all
    assert AuditEntry.objects.filter(action="data_source.create", actor=lab.vadmin).count() == 1


def test_a_platform_admin_declares_a_platform_owned_source(lab):
    r = _client(lab.root).post("/lab/data-sources/", {
        "name": "imagenet", "cluster": "default", "kind": "dataset", "claim_name": "imagenet",
        "department": "", "shared_with_all": "on"})
    assert r.status_code == 302
    s = DataSource.objects.get(name="imagenet")
    assert s.department is None and s.shared_with_all and s.kind == "dataset" and not s.writable


@pytest.mark.parametrize("form, field, message", [
    ({"name": "Not a slug!", "claim_name": "x"}, "name", b"letters, numbers, underscores or hyphens"),
    ({"name": "ok", "claim_name": ""}, "claim_name", b"This field is required."),
    ({"name": "ok", "claim_name": "Bad_Claim"}, "claim_name", b"A claim name is lower-case letters"),
    ({"name": "ok", "claim_name": "x", "kind": "dataset", "writable": "on"}, "writable", b"read-only"),
    ({"name": "ok", "claim_name": "x", "cluster": "nowhere"}, "cluster", b"No such cluster."),
    ({"name": "ok", "claim_name": "x", "shared_with": "nlp, biology"}, "shared_with", b"No department biology."),
])
def test_bad_input_shows_the_field_error_and_saves_nothing(lab, form, field, message):
    r = _client(lab.vadmin).post("/lab/data-sources/", {"cluster": "default", **form})
    assert r.status_code == 400
    assert b"Nothing was saved" in r.content
    assert f'data-error-for="{field}"'.encode() in r.content and message in r.content
    assert not DataSource.objects.exists()
    assert not AuditEntry.objects.filter(action="data_source.create").exists()


def test_a_duplicate_name_on_the_cluster_is_refused_on_the_form(lab, sources):
    r = _client(lab.vadmin).post("/lab/data-sources/", {"name": "vision-scratch", "cluster": "default",
                                                          "claim_name": "again"})
    assert r.status_code == 400 and b"already has a data source" in r.content
    assert DataSource.objects.get(name="vision-scratch").claim_name == "vision-scratch"


def test_a_researcher_gets_403_on_post(lab, sources):
    own, _, _ = sources
    c = _client(lab.alice)
    assert c.post("/lab/data-sources/", {"name": "mine", "cluster": "default", "claim_name": "mine"}).status_code == 403
    assert c.post(f"/lab/data-sources/{own.pk}/delete").status_code == 403
    assert set(DataSource.objects.values_list("name", flat=True)) == {"vision-scratch", "imagenet", "nlp-corpus"}


def test_a_department_admin_deletes_their_source_but_not_others(lab, sources):
    own, shared, other = sources
    c = _client(lab.vadmin)
    assert c.post(f"/lab/data-sources/{other.pk}/delete").status_code == 404  # another department's: not found
    assert c.post(f"/lab/data-sources/{shared.pk}/delete").status_code == 403  # platform-owned, visible
    r = c.post(f"/lab/data-sources/{own.pk}/delete")
    assert r.status_code == 302 and r["Location"] == "/lab/data-sources/"
    assert set(DataSource.objects.values_list("name", flat=True)) == {"imagenet", "nlp-corpus"}
    assert AuditEntry.objects.filter(action="data_source.delete", actor=lab.vadmin).count() == 1
    assert c.get(f"/lab/data-sources/{own.pk}/delete").status_code == 405


def test_the_form_chooses_the_labs_default_cluster_not_the_first_by_name(lab):
    from scheduling.models import Cluster

    Cluster.objects.create(name="cloud", backend="simulated")  # before "default" by name
    body = _client(lab.root).get("/lab/data-sources/").content.decode()
    options = body[body.index('<select name="cluster"'):].split("</select>")[0]
    assert options.index('value="default"') < options.index('value="cloud"')
    assert 'value="default" selected' in options and 'value="cloud" selected' not in options
    assert "(the lab&#x27;s default)" in options or "(the lab's default)" in options
    assert "Every job that mounts this source runs on its cluster." in body


def test_a_form_sent_back_keeps_the_cluster_it_chose(lab):
    from scheduling.models import Cluster

    Cluster.objects.create(name="cloud", backend="simulated")
    r = _client(lab.root).post("/lab/data-sources/", {"name": "Not a slug!", "cluster": "cloud",
                                                       "claim_name": "x"})
    assert r.status_code == 400
    options = r.content.decode().split('<select name="cluster"')[1].split("</select>")[0]
    assert 'value="cloud" selected' in options and 'value="default" selected' not in options
