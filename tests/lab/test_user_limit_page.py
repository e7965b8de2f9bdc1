"""The per-user limits page of a department: its admins see every member's limit and use, and set or remove
limits through the API's serializer and service; anyone else gets a 403 or a 404."""

from __future__ import annotations

import pytest
from django.test import Client

from quotas.models import UserLimit

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_admins_set_and_remove_limits_from_the_page(lab, submit):
    submit(lab.alice, gpus=1)
    c = _client(lab.vadmin)
    assert 'id="limits-link"' in c.get("/lab/departments/vision/").content.decode()
    r = c.post("/lab/departments/vision/limits", {"user": "", "max_gpus": "4", "max_queued": ""})
    assert r.status_code == 302
    r = c.post("/lab/departments/vision/limits", {"user": "alice", "max_gpus": "2", "max_queued": "3"})
    assert r.status_code == 302
    assert {(x.user_id, x.max_gpus, x.max_queued) for x in UserLimit.objects.all()} == {
        (None, 4, None), (lab.alice.pk, 2, 3)}
    page = c.get("/lab/departments/vision/limits").content.decode()
    assert '<tr data-member="alice"><td>alice</td>' in page and "2 GPUs, 3 waiting" in page
    assert '<tr data-member="amy"><td>amy</td>\n        <td>—</td>\n        <td>4 GPUs</td>' in page
    assert c.post("/lab/departments/vision/limits", {"action": "remove", "user": "alice"}).status_code == 302
    assert c.post("/lab/departments/vision/limits", {"action": "remove", "user": ""}).status_code == 302
    assert not UserLimit.objects.exists()


@pytest.mark.parametrize(("form", "field"), [
    ({"user": "alice", "max_gpus": "-1"}, "max_gpus"),
    ({"user": "alice", "max_gpus": "0"}, "max_gpus"),
    ({"user": "alice", "max_gpus": "9"}, "max_gpus"),  # over the department's quota
    ({"user": "alice", "max_gpus": "two"}, "max_gpus"),
    ({"user": "alice", "max_gpus": ""}, "max_gpus"),
    ({"user": "alice", "max_gpus": "2", "max_queued": "0"}, "max_queued"),
    ({"user": "nobody", "max_gpus": "2"}, "user"),
    ({"user": "bob", "max_gpus": "2"}, "user"),  # another department's member
])
def test_bad_input_re_renders_the_form_with_its_error(lab, form, field):
    r = _client(lab.vadmin).post("/lab/departments/vision/limits", form)
    assert r.status_code == 400
    assert f'data-error-for="{field}"' in r.content.decode()
    assert not UserLimit.objects.exists()


def test_only_the_department_s_admins_reach_the_page(lab):
    assert _client(lab.alice).get("/lab/departments/vision/limits").status_code == 403
    assert _client(lab.nadmin).get("/lab/departments/vision/limits").status_code == 404
    assert _client(lab.nadmin).post("/lab/departments/vision/limits", {"max_gpus": "1"}).status_code == 404
    assert _client(lab.root).get("/lab/departments/vision/limits").status_code == 200
    assert not UserLimit.objects.exists()
