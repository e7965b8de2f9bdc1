"""The lab's secrets page: members see names and keys, admins declare, rotate and delete, and no value typed
into a form is ever rendered back (not even when the form is refused). The submit form takes secrets too,
and its quote warns about token-like plain env."""

from __future__ import annotations

import pytest
from django.test import Client

from workloads.models import DepartmentSecret
from workloads.services import secrets

pytestmark = pytest.mark.django_db

TOKEN = "0123456789abcdef0123456789abcdef01234567"


def browser(user):
    c = Client()
    c.force_login(user)
    return c


def test_admin_declares_a_value_secret_and_nobody_sees_the_value(lab):
    r = browser(lab.vadmin).post("/lab/secrets/", {"name": "wandb", "kind": "value", "purpose": "env",
                                                   "values": f"api_key={TOKEN}"})
    assert r.status_code == 302
    assert DepartmentSecret.objects.get(name="wandb").values == {"api_key": TOKEN}
    for user in (lab.vadmin, lab.alice, lab.root):
        page = browser(user).get("/lab/secrets/")
        assert page.status_code == 200 and 'data-secret="wandb"' in page.content.decode()
        assert TOKEN not in page.content.decode()
    assert 'data-secret="wandb"' not in browser(lab.bob).get("/lab/secrets/").content.decode()
    assert "Declare a secret" not in browser(lab.alice).get("/lab/secrets/").content.decode()


def test_a_refused_form_does_not_echo_the_values(lab):
    r = browser(lab.vadmin).post("/lab/secrets/", {"name": "Bad Name", "kind": "value", "purpose": "env",
                                                   "values": f"api_key={TOKEN}", "password": TOKEN})
    assert r.status_code == 400 and TOKEN not in r.content.decode()
    r = browser(lab.vadmin).post("/lab/secrets/", {"name": "ok", "kind": "value", "purpose": "env",
                                                   "values": TOKEN})  # no "=": the line is not quoted back
    assert r.status_code == 400 and TOKEN not in r.content.decode()
    assert not DepartmentSecret.objects.exists()


def test_researchers_cannot_declare_and_other_departments_cannot_touch(lab):
    assert browser(lab.alice).post("/lab/secrets/", {"name": "x", "kind": "value",
                                                     "values": "a=b"}).status_code == 403
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="wandb", kind="value",
                          values={"api_key": TOKEN})
    assert browser(lab.nadmin).post("/lab/secrets/vision/wandb/delete").status_code == 404
    assert browser(lab.alice).post("/lab/secrets/vision/wandb/delete").status_code == 403
    assert browser(lab.nadmin).post("/lab/secrets/vision/wandb/rotate", {"values": "api_key=x"}).status_code == 404
    assert DepartmentSecret.objects.get().values == {"api_key": TOKEN}


def test_rotate_and_delete(lab):
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="wandb", kind="value",
                          values={"api_key": TOKEN})
    c = browser(lab.vadmin)
    assert c.post("/lab/secrets/vision/wandb/rotate", {"values": "api_key=new"}).status_code == 302
    assert DepartmentSecret.objects.get().values == {"api_key": "new"}
    c.post("/lab/secrets/vision/wandb/rotate", {"values": "no equals sign"})  # refused, kept
    assert DepartmentSecret.objects.get().values == {"api_key": "new"}
    assert c.post("/lab/secrets/vision/wandb/delete").status_code == 302
    assert not DepartmentSecret.objects.exists()


def test_submit_form_takes_secret_lines_and_shows_their_names_on_the_job_page(lab):
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="wandb", kind="value",
                          values={"api_key": TOKEN})
    form = {"name": "t", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python train.py",
            "flavor": "a100-80gb", "gpus": "1", "pods": "1", "tier": "elastic", "urgency": "normal",
            "task_type": "train", "max_runtime_s": "3600", "secrets": "WANDB_API_KEY=wandb/api_key\n/etc/w=wandb",
            "env": f"HF_TOKEN=hf_{'x1' * 12}"}
    c = browser(lab.alice)
    r = c.post("/jobs/new", form, follow=True)
    assert r.status_code == 200
    text = r.content.decode()
    assert "data-secrets" in text and "WANDB_API_KEY" in text and "/etc/w" in text and TOKEN not in text
    assert "HF_TOKEN looks like a Hugging Face token" in text  # the warning, on the page after submitting
    bad = c.post("/jobs/new", {**form, "secrets": "WANDB_API_KEY=nope/api_key"})
    assert bad.status_code == 400 and "no such secret" in bad.content.decode()
    bad = c.post("/jobs/new", {**form, "secrets": "garbage"})
    assert bad.status_code == 400 and "NAME=secret/key" in bad.content.decode()


def test_the_quote_warns_about_a_token_in_plain_env(lab):
    form = {"name": "t", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python train.py",
            "flavor": "a100-80gb", "gpus": "1", "env": f"WANDB_API_KEY={TOKEN}"}
    r = browser(lab.alice).post("/jobs/new/quote", form)
    assert r.status_code == 200, r.content.decode()[:500]
    text = r.content.decode()
    assert "data-quote-warning" in text and "department secret" in text and TOKEN not in text


def test_a_platform_admin_declares_for_another_department(lab):
    c = browser(lab.root)
    assert c.post("/lab/secrets/", {"name": "hf", "kind": "reference", "reference_name": "hf-token",
                                    "keys": "token", "department": "nlp"}).status_code == 302
    assert DepartmentSecret.objects.get().department == lab.nlp
    r = c.post("/lab/secrets/", {"name": "x", "kind": "reference", "reference_name": "x", "keys": "k",
                                 "department": "nowhere"})
    assert r.status_code == 400 and "No such department" in r.content.decode()


def test_the_django_admin_lists_secrets_read_only_without_their_values(lab):
    from django.contrib import admin

    lab.root.is_staff = lab.root.is_superuser = True
    lab.root.save()
    secret = secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="wandb", kind="value",
                                   values={"api_key": TOKEN})
    c = browser(lab.root)
    listing = c.get("/admin/workloads/departmentsecret/", {"q": "wandb"})
    assert listing.status_code == 200 and "wandb" in listing.content.decode()
    detail = c.get(f"/admin/workloads/departmentsecret/{secret.pk}/change/")
    assert detail.status_code == 200 and TOKEN not in detail.content.decode()
    assert not admin.site._registry[DepartmentSecret].has_change_permission(None)
