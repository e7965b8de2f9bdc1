"""Template pages: the submit form prefilled from a template or a cloned job, "Save as template", the
Templates page with edit and delete."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from scheduling.models import Job, JobTemplate
from scheduling.services.templates import spec_of_job, template_create
from scheduling.views.templates import spec_form_values
from tests.conftest import job_payload

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _value(html: str, name: str) -> str | None:
    m = re.search(rf'<input name="{name}" value="([^"]*)"', html)
    return m.group(1) if m else None


def _textarea(html: str, name: str) -> str | None:
    m = re.search(rf'<textarea name="{name}"[^>]*>(.*?)</textarea>', html, re.S)
    return m.group(1) if m else None


def _selected(html: str, name: str) -> str | None:
    m = re.search(rf'<select name="{name}"[^>]*>.*?<option value="([^"]+)" selected', html, re.S)
    return m.group(1) if m else None


def test_the_submit_form_starts_from_a_template(lab):
    t = template_create(user=lab.alice, name="resnet", spec=job_payload(
        name="resnet-run", gpus=2, env={"EPOCHS": "10", "LR": "0.1"}, bid=1500, tier="backfill",
        command=["/bin/sh", "-c", "python train.py --epochs $EPOCHS"]))
    html = _client(lab.alice).get(f"/jobs/new?template={t.pk}").content.decode()
    assert (_value(html, "name"), _value(html, "gpus"), _value(html, "bid")) == ("resnet-run", "2", "1.5")
    assert _textarea(html, "command") == "python train.py --epochs $EPOCHS"
    assert _textarea(html, "env") == "EPOCHS=10\nLR=0.1"
    assert _selected(html, "tier") == "backfill"
    assert "Prefilled from template resnet" in html
    assert f'<option value="{t.pk}" selected>resnet</option>' in html


def test_clone_prefills_the_form_with_the_job_and_submits_the_same_job(lab, submit):
    job = submit(lab.alice, name="orig", gpus=3, command=["python", "train.py", "--lr", "0.1"], memory="2Gi",
                 urgency="high")
    c = _client(lab.amy)
    html = c.get(f"/jobs/new?clone={job.pk}").content.decode()
    assert f"Prefilled from job {job.pk} (orig)" in html
    assert json.loads(_textarea(html, "command").replace("&quot;", '"')) == ["python", "train.py", "--lr", "0.1"]
    assert (_value(html, "memory"), _selected(html, "urgency")) == ("2048Mi", "high")
    # what the form shows, posted back, is the same job again
    r = c.post("/jobs/new", spec_form_values(spec_of_job(job)))
    assert r.status_code == 302, r.content.decode()[:2000]
    clone = Job.objects.exclude(pk=job.pk).get()
    assert (clone.name, clone.gpus_per_pod, clone.command, clone.memory_mib, clone.urgency, clone.owner) == (
        "orig", 3, job.command, 2048, "high", lab.amy)


@pytest.mark.parametrize("query", ["template={foreign}", "clone={foreign_job}", "template=abc", "clone=999999",
                                   "template={personal}"])
def test_prefill_from_what_one_may_not_see_is_a_404(lab, submit, query):
    foreign = template_create(user=lab.nadmin, name="nlp", spec=job_payload(), scope="department")
    personal = template_create(user=lab.amy, name="amys", spec=job_payload())
    foreign_job = submit(lab.bob)
    url = "/jobs/new?" + query.format(foreign=foreign.pk, foreign_job=foreign_job.pk, personal=personal.pk)
    assert _client(lab.alice).get(url).status_code == 404


def test_save_as_template_from_the_form(lab):
    c = _client(lab.alice)
    form = {"name": "bert", "image": "busybox", "command": "echo hi", "flavor": "a100-80gb", "gpus": "2",
            "env": "A=1", "bid": "0.25", "template_name": "bert-2gpu", "save_template": "1"}
    r = c.post("/jobs/new", form)
    assert r.status_code == 302 and r["Location"] == "/templates/"
    t = JobTemplate.objects.get()
    assert (t.name, t.scope, t.owner, t.spec["gpus"], t.spec["bid"], t.spec["command"], t.spec["env"]) == (
        "bert-2gpu", "personal", lab.alice, 2, 250, ["/bin/sh", "-c", "echo hi"], {"A": "1"})
    assert Job.objects.count() == 0  # saved, not submitted
    # a researcher cannot publish to the department: the box is not even offered, and posting it is refused
    assert b'name="template_scope"' not in c.get("/jobs/new").content
    refused = c.post("/jobs/new", {**form, "template_name": "shared", "template_scope": "department"})
    assert refused.status_code == 400 and JobTemplate.objects.count() == 1
    assert b'name="template_scope"' in _client(lab.vadmin).get("/jobs/new").content
    assert _client(lab.vadmin).post("/jobs/new", {**form, "template_scope": "department"}).status_code == 302
    assert JobTemplate.objects.get(scope="department").department == lab.vision


@pytest.mark.parametrize("change, field", [({"template_name": "has space"}, "template_name"),
                                           ({"template_name": ""}, "template_name"),
                                           ({"gpus": "0"}, "gpus"), ({"image": "UPPER/x"}, "image"),
                                           ({"command": "[broken"}, "command")])
def test_save_as_template_with_bad_input_says_why(lab, change, field):
    form = {"name": "bert", "image": "busybox", "command": "echo hi", "flavor": "a100-80gb", "gpus": "1",
            "template_name": "ok", "save_template": "1", **change}
    r = _client(lab.alice).post("/jobs/new", form)
    assert r.status_code == 400
    assert re.search(rf'data-error-for="{field}"|{field}', r.content.decode())
    assert JobTemplate.objects.count() == 0


def test_duplicate_name_from_the_form(lab):
    template_create(user=lab.alice, name="ok", spec=job_payload())
    form = {"name": "bert", "image": "busybox", "command": "echo hi", "flavor": "a100-80gb", "gpus": "1",
            "template_name": "ok", "save_template": "1"}
    r = _client(lab.alice).post("/jobs/new", form)
    assert r.status_code == 400 and b"exists already" in r.content


def test_templates_page_lists_mine_and_the_departments_with_edit_for_who_may(lab):
    mine = template_create(user=lab.alice, name="mine", spec=job_payload(), description="my own")
    shared = template_create(user=lab.vadmin, name="shared", spec=job_payload(), scope="department")
    template_create(user=lab.amy, name="amys", spec=job_payload())
    template_create(user=lab.nadmin, name="nlps", spec=job_payload(), scope="department")
    html = _client(lab.alice).get("/templates/").content.decode()
    assert 'data-template="mine"' in html and 'data-template="shared"' in html
    assert "amys" not in html and "nlps" not in html
    assert f"/templates/{mine.pk}/edit" in html and f"/templates/{shared.pk}/edit" not in html
    assert f"/templates/{shared.pk}/edit" in _client(lab.vadmin).get("/templates/").content.decode()


def test_edit_and_delete_pages(lab):
    shared = template_create(user=lab.vadmin, name="dept", spec=job_payload(), scope="department")
    admin = _client(lab.vadmin)
    assert admin.get(f"/templates/{shared.pk}/edit").status_code == 200
    ok = admin.post(f"/templates/{shared.pk}/edit", {"name": "dept-4", "description": "four",
                                                      "spec": json.dumps(job_payload(gpus=4))})
    assert ok.status_code == 302
    shared.refresh_from_db()
    assert (shared.name, shared.description, shared.spec["gpus"]) == ("dept-4", "four", 4)
    not_json = admin.post(f"/templates/{shared.pk}/edit", {"name": "x", "spec": "{nope"})
    assert not_json.status_code == 400 and b"Not JSON" in not_json.content
    bad = admin.post(f"/templates/{shared.pk}/edit", {"name": "x", "spec": json.dumps(job_payload(gpus=0))})
    assert bad.status_code == 400 and b"gpus" in bad.content
    # a researcher reads it but may not change it; another department does not see it at all
    assert _client(lab.amy).post(f"/templates/{shared.pk}/edit", {"name": "x"}).status_code == 403
    assert _client(lab.amy).post(f"/templates/{shared.pk}/delete").status_code == 403
    assert _client(lab.nadmin).get(f"/templates/{shared.pk}/edit").status_code == 404
    assert _client(lab.nadmin).post(f"/templates/{shared.pk}/delete").status_code == 404
    assert admin.post(f"/templates/{shared.pk}/delete").status_code == 302
    assert not JobTemplate.objects.filter(pk=shared.pk).exists()


def test_job_page_has_a_clone_button(lab, submit):
    job = submit(lab.alice)
    assert f'href="/jobs/new?clone={job.pk}"'.encode() in _client(lab.amy).get(f"/jobs/{job.pk}/").content


def test_the_form_values_of_a_spec_write_mounts_checkpoint_and_secrets_in_the_forms_line_syntax():
    values = spec_form_values({
        "name": "x", "mounts": [{"source": "imagenet", "path": "/data", "read_only": True},
                                {"source": "scratch", "path": "/out", "read_only": False}],
        "checkpoint": {"source": "scratch", "path": "/checkpoint"},
        "secrets": [{"secret": "wandb", "key": "api_key", "env": "WANDB_API_KEY"}, {"secret": "hf", "path": "/etc/hf"}],
        "max_retries": 2, "retry_on_exit_codes": [3, 137],
    })
    assert values["mounts"] == "imagenet:/data\nscratch:/out:rw"
    assert values["checkpoint"] == "scratch"
    assert values["secrets"] == "WANDB_API_KEY=wandb/api_key\n/etc/hf=hf"
    assert (values["max_retries"], values["retry_on_exit_codes"]) == ("2", "3, 137")
    assert spec_form_values({"name": "x"})["retry_on_exit_codes"] == ""
    assert spec_form_values({"checkpoint": True})["checkpoint"] == "yes"


def test_the_submit_form_takes_the_retry_fields(lab):
    c = _client(lab.alice)
    html = c.get("/jobs/new").content.decode()
    assert _value(html, "max_retries") == "0" and _value(html, "retry_on_exit_codes") == ""
    form = {"name": "retrying", "image": "busybox", "command": "python train.py", "flavor": "a100-80gb",
            "gpus": "1", "pods": "1", "cpu": "1", "memory": "1Gi", "max_runtime_s": "600", "tier": "elastic",
            "urgency": "normal", "bid": "0"}
    r = c.post("/jobs/new", {**form, "max_retries": "2", "retry_on_exit_codes": "3, 137"})
    assert r.status_code == 302, r.content.decode()[:2000]
    job = Job.objects.get(name="retrying")
    assert (job.max_retries, job.retry_on_exit_codes) == (2, [3, 137])
    # and cloning it shows them again, as typed
    html = c.get(f"/jobs/new?clone={job.pk}").content.decode()
    assert (_value(html, "max_retries"), _value(html, "retry_on_exit_codes")) == ("2", "3, 137")


@pytest.mark.parametrize("fields, message", [
    ({"max_retries": "2", "retry_on_exit_codes": "3, oom"}, "Exit codes are whole numbers"),
    ({"max_retries": "2", "retry_on_exit_codes": "3, 300"}, "less than or equal to 255"),
    ({"max_retries": "0", "retry_on_exit_codes": "3"}, "Set max_retries too"),
    ({"max_retries": "11"}, "less than or equal to 10"),
])
def test_bad_retry_fields_show_their_error_and_submit_nothing(lab, fields, message):
    form = {"name": "retrying", "image": "busybox", "command": "true", "flavor": "a100-80gb", "gpus": "1",
            "pods": "1", "cpu": "1", "memory": "1Gi", "max_runtime_s": "600", "tier": "elastic", "urgency": "normal"}
    r = _client(lab.alice).post("/jobs/new", {**form, **fields})
    assert r.status_code == 400
    field = "retry_on_exit_codes" if "retry_on_exit_codes" in fields else "max_retries"
    assert re.search(rf'data-error-for="{field}">[^<]*{message}', r.content.decode())
    assert not Job.objects.exists()


def test_an_invalid_number_is_shown_again_as_typed_with_its_error_in_the_fields_box(lab):
    r = _client(lab.alice).post("/jobs/new", {"name": "n", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                              "command": "python x.py", "flavor": "a100-80gb", "gpus": "2x",
                                              "pods": "1", "max_runtime_s": "3600"})
    html = r.content.decode()
    assert r.status_code in (200, 400) and _value(html, "gpus") == "2x"
    tag = re.search(r'<input name="gpus"[^>]*>', html).group(0)
    # A number input would show nothing for "2x": the browser drops a value that is not a number.
    assert 'type="number"' not in tag and 'aria-invalid="true"' in tag
    assert re.search(r'<div class="field"><label>GPUs per pod <input name="gpus"[^>]*></label>\s*'
                     r'<p class="field-error" id="error-gpus" data-error-for="gpus">', html)
    assert 'type="number"' in re.search(r'<input name="pods"[^>]*>', html).group(0)  # a valid one stays a number
