"""A resizable job's size range (``min_pods``, ``global_batch_size``) from the submit form and from a lab file's
department template: kept as the API keeps it, each bad value refused on its field (a 400 with the form's field
error; the lab file's error at the template's spec field), nothing written."""

from __future__ import annotations

import pytest
from django.test import Client

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab
from scheduling.models import Job, JobTemplate

pytestmark = pytest.mark.django_db

FORM = {"name": "llm", "image": "busybox", "command": "python train.py", "flavor": "a100-80gb", "gpus": "1",
        "pods": "8", "checkpoint_interval_s": "900"}


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_the_form_submits_a_size_range(lab):
    r = _client(lab.alice).post("/jobs/new", {**FORM, "min_pods": "2", "global_batch_size": "512"})
    assert r.status_code == 302, r.content.decode()[-600:]
    job = Job.objects.get()
    assert (job.pods, job.min_pods, job.global_batch_size) == (8, 2, 512)
    html = _client(lab.alice).get(f"/jobs/new?clone={job.pk}").content.decode()
    assert 'name="min_pods" value="2"' in html and 'name="global_batch_size" value="512"' in html


BAD_FORM = [
    ({"min_pods": "9"}, "min_pods", "above the maximum"),
    ({"min_pods": "two"}, "min_pods", "whole number"),
    ({"min_pods": "2", "checkpoint_interval_s": ""}, "checkpoint_interval_s", "declare how often it saves"),
    ({"global_batch_size": "512"}, "global_batch_size", "set min_pods too"),
    ({"min_pods": "2", "global_batch_size": "4"}, "global_batch_size", ""),
]


@pytest.mark.parametrize(("change", "field", "words"), BAD_FORM, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_FORM)])
def test_a_bad_size_range_in_the_form_is_a_400_on_its_field(lab, change, field, words):
    r = _client(lab.alice).post("/jobs/new", {**FORM, **change})
    assert r.status_code == 400
    html = r.content.decode()
    assert f'data-error-for="{field}"' in html
    assert words in html
    assert not Job.objects.exists()


TEMPLATE = """templates:
  - department: vision
    name: resizable-llm
    spec:
      name: resizable-llm
      image: nvcr.io/nvidia/pytorch:24.05-py3
      command: [python, train.py]
      flavor: a100-80gb
      gpus: 1
      pods: 4
      min_pods: 2
      checkpoint_interval_s: 900
      global_batch_size: 256
"""


def test_a_lab_file_template_holds_a_size_range():
    apply_lab(demo.LAB_FILE.read_text() + TEMPLATE)
    spec = JobTemplate.objects.get(name="resizable-llm").spec
    assert (spec["pods"], spec["min_pods"], spec["global_batch_size"]) == (4, 2, 256)


@pytest.mark.parametrize(("change", "field"), [
    (("      min_pods: 2\n", "      min_pods: 5\n"), "min_pods"),
    (("      checkpoint_interval_s: 900\n", ""), "checkpoint_interval_s"),
    (("      global_batch_size: 256\n", "      global_batch_size: 2\n"), "global_batch_size"),
])
def test_a_bad_size_range_in_a_lab_file_template_is_an_error_at_its_field(change, field):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(demo.LAB_FILE.read_text() + TEMPLATE.replace(*change))
    paths = {".".join(map(str, e.path)) for e in exc.value.errors}
    assert f"templates.0.spec.{field}" in paths, paths
    assert not JobTemplate.objects.filter(name="resizable-llm").exists()
