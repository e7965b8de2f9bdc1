"""What a researcher clicks: log in, submit a job in the form, watch it go queued -> running -> succeeded
(the job page follows the state live), see a bad submission's field errors. Drives Debian's Chromium through
Playwright; skipped on a laptop without Chromium, required in CI."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def page(live_server):
    if CHROMIUM is None:
        if IN_CI:
            pytest.fail("CI needs Debian's chromium for the browser test")
        pytest.skip("no chromium on this machine")
    playwright = pytest.importorskip("playwright.sync_api")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs an event loop in this thread
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        pg = browser.new_page()
        pg.set_default_timeout(15_000)
        yield pg
        browser.close()


def _advance_cluster():
    from django.utils import timezone

    from scheduling.models import SimPod
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    run_cycle()
    sync_cluster()
    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(days=1))
    sync_cluster()


def test_researcher_submits_and_follows_a_job(page, live_server, lab, tmp_path):
    page.goto(f"{live_server.url}/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw-alice-long-enough")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Home')")  # the home page: my jobs, quota, budget, free GPUs
    page.click("text=Submit a job")

    # a mistake first: the form shows field errors and keeps what was typed
    page.fill("input[name=name]", "browser-job")
    page.fill("input[name=image]", "Not An Image")
    page.fill("textarea[name=command]", "python train.py")
    page.fill("input[name=gpus]", "2")
    page.click("button:has-text('Submit')")
    assert page.locator("[data-error-for=image]").is_visible()
    assert page.input_value("input[name=name]") == "browser-job"

    page.fill("input[name=image]", "nvcr.io/nvidia/pytorch:24.05-py3")
    page.click("button:has-text('Submit')")
    page.wait_for_selector("#job-state")
    assert page.inner_text("#job-state") == "queued"
    assert page.locator("text=Why is it waiting?").is_visible()
    page.screenshot(path=str(tmp_path / "queued.png"))

    _advance_cluster()
    # the page polls the API and reloads when the state changes
    # A locator assertion, not wait_for_function: the page's Content-Security-Policy forbids evaluating strings.
    from playwright.sync_api import expect

    expect(page.locator("#job-state")).to_have_text("succeeded", timeout=20_000)
    timeline = page.inner_text("#timeline")
    for step in ("queued", "admitted", "running", "succeeded"):
        assert step in timeline
    page.screenshot(path=str(tmp_path / "succeeded.png"))

    page.click("text=Jobs")
    page.wait_for_selector("tr[data-job]")
    assert "browser-job" in page.inner_text("table.jobs")
    assert "succeeded" in page.inner_text("table.jobs")


def test_admin_tries_a_policy_in_whatif_and_opens_it_in_the_editor(page, live_server, lab, submit, tmp_path):
    import json

    from django.utils import timezone

    from scheduling.models import Job
    from scheduling.services.policy import current_policy, policy_as_dict

    t0 = timezone.now() - timedelta(days=1)
    for i in range(6):
        job = submit((lab.alice, lab.bob)[i % 2], name=f"h{i}", gpus=4, max_runtime_s=7200)
        Job.objects.filter(pk=job.pk).update(state="succeeded", submitted_at=t0 + timedelta(minutes=i),
                                              started_at=t0 + timedelta(minutes=i),
                                              finished_at=t0 + timedelta(minutes=i + 40))
    proposal = policy_as_dict(current_policy()[0])
    proposal["aging_per_minute"] = 5.0

    page.goto(f"{live_server.url}/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", "pw-root-long-enough")
    page.click("button[type=submit]")
    page.click("#admin-menu summary")  # the admins' pages are in the bar's Admin menu
    page.click("nav >> text=What-if")
    page.fill("textarea[name=policy]", json.dumps(proposal))
    page.fill("input[name='quota:nlp:a100-80gb:nominal']", "2")
    page.click("button:has-text('Replay and compare')")
    page.wait_for_selector("#whatif-result")
    assert page.locator("tr[data-dept=vision]").is_visible() and page.locator("tr[data-dept=nlp]").is_visible()
    assert "aging_per_minute: 1.0 → 5.0" in page.inner_text("#whatif-result")
    page.screenshot(path=str(tmp_path / "whatif.png"), full_page=True)

    page.click("#whatif-apply")
    page.wait_for_selector("#from-whatif")
    assert json.loads(page.input_value("textarea[name=policy]"))["aging_per_minute"] == 5.0


def _log_in(page, live_server, who="alice"):
    page.goto(f"{live_server.url}/")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", f"pw-{who}-long-enough")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Home')")


def test_the_form_marks_only_what_was_typed_and_errors_keep_the_grid(page, live_server, lab):
    from playwright.sync_api import expect

    _log_in(page, live_server)
    page.goto(f"{live_server.url}/jobs/new")
    # The live quote answers an empty form with errors on Name and Image: nothing is typed, nothing is red.
    expect(page.locator("#quote [data-quote-error]").first).to_be_attached()
    assert page.locator("[aria-invalid=true]").count() == 0
    page.fill("input[name=image]", "Not An Image")
    expect(page.locator("input[name=image][aria-invalid=true]")).to_have_count(1)
    assert page.locator("input[name=name][aria-invalid=true]").count() == 0

    # A bad number comes back as typed, with its error under it, in its own cell of the row.
    page.fill("input[name=name]", "grid")
    page.fill("input[name=image]", "nvcr.io/nvidia/pytorch:24.05-py3")
    page.fill("textarea[name=command]", "python train.py")
    page.fill("input[name=max_runtime_s]", "10")
    page.click("button:has-text('Submit')")
    error = page.locator("[data-error-for=max_runtime_s]")
    expect(error).to_be_visible()
    assert page.input_value("input[name=max_runtime_s]") == "10"
    field = page.locator("input[name=max_runtime_s]").bounding_box()
    below = error.bounding_box()
    assert abs(below["x"] - field["x"]) < 2 and below["y"] > field["y"]  # under its input, not in the next cell
    cpu, memory = (page.locator(f"input[name={n}]").bounding_box() for n in ("cpu", "memory"))
    assert abs(cpu["y"] - memory["y"]) < 2 and memory["x"] > cpu["x"]  # the row's other fields keep their places


def test_add_data_workers_in_one_click_from_the_job_page(page, live_server, lab, submit):
    """The saw-tooth hint's fix from the job's page: the clone with CPU data workers beside the trainers, in the
    submit form prefilled role by role, submitted as one job of two roles."""
    from playwright.sync_api import expect

    from quotas.models import Flavor, FlavorKind, Quota, QuotaResource
    from scheduling.models import Job, Node

    cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    Node.objects.create(cluster=lab.cluster, name="c0", flavor=cpu, gpus=0, cpu_millicores=32000,
                        memory_mib=131072, labels={"pool": "cpu"})
    Quota.objects.create(department=lab.vision, flavor=cpu, resource=QuotaResource.CPU, nominal=24)
    job = submit(lab.alice, name="train", gpus=2, pods=2, cpu="8", memory="32Gi")

    _log_in(page, live_server)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    page.fill("#add-data-workers input[name=add_data_workers]", "3")
    page.click("#add-data-workers button")
    expect(page.locator("#started-from")).to_contain_text("with 3 more data workers")
    assert [page.input_value(f"input[name=role-0-{f}]") for f in ("name", "pods", "gpus")] == ["trainer", "2", "2"]
    assert [page.input_value(f"input[name=role-1-{f}]") for f in ("name", "pods", "gpus")] == ["data", "3", "0"]
    assert page.input_value("select[name=role-1-failure_policy]") == "restart-pod"
    assert page.locator("input[name=gpus]").is_disabled()  # the job's size is its roles'
    expect(page.locator("#quote [data-quote=cost]")).to_be_visible()  # the live quote takes the roles

    # one more data worker typed in the form, then submitted
    page.fill("input[name=role-1-pods]", "4")
    page.click("button:has-text('Submit')")
    page.wait_for_selector("#job-state")
    clone = Job.objects.exclude(pk=job.pk).get()
    assert page.url.rstrip("/").endswith(f"/jobs/{clone.pk}")
    assert list(clone.roles.order_by("index").values_list("name", "pods", "gpus_per_pod", "failure_policy")) == [
        ("trainer", 2, 2, "restart-attempt"), ("data", 4, 0, "restart-pod")]
    assert clone.total_gpus == 4
