"""What a researcher clicks to reuse work: pick a department template on the submit form, change a field,
submit, see the job; then clone that job from its page and save the form as a template of their own."""

from __future__ import annotations

import pytest

from tests.conftest import job_payload

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_pick_a_template_submit_then_clone_and_save(login, live_server, lab):
    from scheduling.models import Job, JobTemplate
    from scheduling.services.templates import template_create

    template_create(user=lab.vadmin, name="resnet-shared", scope="department", description="ResNet-50",
                    spec=job_payload(name="resnet50", gpus=2, env={"EPOCHS": "90"}, tier="backfill"))
    page = login("alice")
    page.goto(f"{live_server.url}/jobs/new")
    page.select_option("#start-template", label="resnet-shared (department)")
    page.click("form.start-from button[type=submit]")
    page.wait_for_selector("#started-from")
    assert page.input_value("input[name=name]") == "resnet50"
    assert page.input_value("input[name=gpus]") == "2"
    assert page.input_value("textarea[name=env]") == "EPOCHS=90"
    page.fill("input[name=name]", "resnet50-run2")
    page.click("form.form button[type=submit]:has-text('Submit')")
    page.wait_for_selector("h1:has-text('resnet50-run2')")
    job = Job.objects.get(name="resnet50-run2")
    assert (job.gpus_per_pod, job.tier, job.env, job.owner) == (2, "backfill", {"EPOCHS": "90"}, lab.alice)

    # clone it from its page, and keep the form as a personal template instead of submitting
    page.click("#clone")
    page.wait_for_selector("#started-from")
    assert page.input_value("input[name=name]") == "resnet50-run2"
    page.fill("input[name=template_name]", "my-resnet")
    page.click("button[name=save_template]")
    page.wait_for_selector("h1:has-text('Job templates')")
    assert page.locator("tr[data-template=my-resnet]").count() == 1
    mine = JobTemplate.objects.get(name="my-resnet")
    assert (mine.scope, mine.owner, mine.spec["gpus"], mine.spec["env"]) == ("personal", lab.alice, 2, {"EPOCHS": "90"})
    assert Job.objects.count() == 1
