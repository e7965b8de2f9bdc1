"""What each role clicks on the dashboard, in Debian's Chromium: the home page per role, a chart drawn
with its data, the quote following the submit form, a finished job's logs, the token page, confirmations,
the narrow layout, and the budget forms speaking credits."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _history(lab, points: int):
    from django.utils import timezone

    from scheduling.models import ClusterSample, DepartmentSample
    from scheduling.services.stats import bucket

    now = timezone.now()
    for i in range(points):
        at = bucket(now - timedelta(minutes=5 * i), 300)
        ClusterSample.objects.create(at=at, flavor=lab.a100, total_gpus=8, busy_gpus=i % 9, free_gpus=8 - i % 9,
                                     queued={"realtime": 0, "elastic": i % 4, "backfill": 1},
                                     waits={"elastic": [2, 1, 0, 0, 0, 0], "backfill": [0, 0, 1, 0, 0, 0]},
                                     preemptions=i % 2)
        DepartmentSample.objects.create(at=at, department=lab.vision, flavor=lab.a100, nominal=4, busy_gpus=i % 5)


def _run_and_finish(job_ids=None):
    from django.utils import timezone

    from scheduling.models import SimPod
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    run_cycle()
    sync_cluster()
    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(days=1))
    sync_cluster()


def test_home_page_per_role(login, lab, submit):
    from quotas.models import ApprovalRule, Wallet

    Wallet.objects.create(department=lab.vision, balance=25_000)
    ApprovalRule.objects.create(department=lab.vision, gpus_above=2)
    submit(lab.alice, name="mine-small", gpus=1)
    submit(lab.amy, name="amys-big", gpus=4)  # waits for approval
    _history(lab, 8)

    page = login("alice")
    for card in ("#my-jobs", "#quota", "#budget", "#free-now"):
        assert page.locator(card).is_visible()
    assert "mine-small" in page.inner_text("#my-jobs") and "25.000 cr" in page.inner_text("#budget")
    assert page.locator("#admin-board").count() == 0 and page.locator("#approvals").count() == 0
    page.click("#quota h3 a")  # each figure links to its detail
    page.wait_for_selector("h1:has-text('Cluster')")

    page = login("vadmin")
    assert "amys-big" in page.inner_text("#dept-jobs") and "amys-big" in page.inner_text("#approvals")
    page.click("#approvals h3 a")
    page.wait_for_url("**/budgets/approvals/")

    page = login("root")
    assert page.locator("#admin-board canvas").count() == 6


def test_a_chart_draws_the_stored_series(login, lab):
    _history(lab, 6)
    page = login("root")
    canvas = page.locator("canvas[data-chart=util]")
    canvas.wait_for()
    page.wait_for_selector("canvas[data-chart=util][data-plotted]")
    plotted = json.loads(canvas.get_attribute("data-plotted"))
    assert [p["y"] for p in plotted["datasets"][0]["data"]] == [round(100 * (i % 9) / 8, 1) for i in reversed(range(6))]
    assert plotted["x"] == "linear"
    waits = json.loads(page.get_attribute("canvas[data-chart=waits]", "data-plotted"))
    by_tier = {d["label"]: d["data"] for d in waits["datasets"]}
    assert by_tier["elastic"][:2] == [12, 6] and by_tier["backfill"][2] == 6
    box = canvas.bounding_box()
    assert box["width"] > 100 and box["height"] > 100  # drawn, not an empty element


def test_charts_have_a_time_axis_and_never_add_gpu_types(login, lab):
    from django.utils import timezone

    from scheduling.models import ClusterSample, DepartmentSample
    from scheduling.services.stats import bucket

    now = timezone.now()
    # A day of samples with a six-hour gap (the portal was down), two GPU types in the department.
    hours = [h for h in range(24) if not 8 <= h < 14]
    for h in hours:
        at = bucket(now - timedelta(hours=h), 300)
        ClusterSample.objects.create(at=at, flavor=lab.a100, total_gpus=8, busy_gpus=4, free_gpus=4,
                                     queued={"elastic": 1}, waits={}, preemptions=0)
        DepartmentSample.objects.create(at=at, department=lab.vision, flavor=lab.a100, nominal=4, busy_gpus=3)
        DepartmentSample.objects.create(at=at, department=lab.vision, flavor=lab.mig, nominal=7, busy_gpus=1)
    page = login("root")
    page.wait_for_selector("canvas[data-chart=util][data-plotted]")
    util = json.loads(page.get_attribute("canvas[data-chart=util]", "data-plotted"))
    assert util["x"] == "linear"  # a time axis: the gap is six hours wide, not one step
    xs = [p["x"] for p in util["datasets"][0]["data"]]
    steps = sorted(b - a for a, b in zip(xs, xs[1:], strict=False))
    assert steps[-1] == 7 * 3600 * 1000 and steps[0] == 3600 * 1000
    # Ticks of a day are wall-clock hours, never minute by minute.
    assert util["ticks"] and len(util["ticks"]) <= 9 and all(t.endswith(":00") for t in util["ticks"])
    page = login("alice")  # the researcher's quota chart
    page.wait_for_selector("canvas[data-chart=dept][data-plotted]")
    dept = json.loads(page.get_attribute("canvas[data-chart=dept]", "data-plotted"))
    lines = {d["label"]: [p["y"] for p in d["data"]] for d in dept["datasets"]}
    assert set(lines["held · a100-80gb"]) == {3} and set(lines["held · a100-mig-3g.40gb"]) == {1}
    assert set(lines["nominal · a100-80gb"]) == {4} and not any(set(v) == {4 + 7} for v in lines.values())


def test_the_quote_follows_the_form(login, lab):
    from quotas.models import Price

    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    page = login("alice")
    page.click("text=Submit a job")
    page.fill("input[name=name]", "quoted")
    page.fill("input[name=image]", "nvcr.io/nvidia/pytorch:24.05-py3")
    page.fill("textarea[name=command]", "python train.py")
    from playwright.sync_api import expect

    cost = page.locator("[data-quote=cost]")
    expect(cost).to_have_text("1.000 cr")  # 1 GPU x 1 h x 1 cr
    page.fill("input[name=gpus]", "3")
    expect(cost).to_have_text("3.000 cr")
    expect(page.locator("[data-quote=start]")).to_contain_text("now")
    page.fill("input[name=max_runtime_s]", "7200")
    expect(cost).to_have_text("6.000 cr")
    page.fill("input[name=gpus]", "0")
    expect(page.locator("[data-quote-error=gpus]")).to_be_visible()
    assert page.get_attribute("input[name=gpus]", "aria-invalid") == "true"
    page.fill("input[name=gpus]", "3")
    page.fill("input[name=pods]", "2")  # 6 GPUs: 4 guaranteed, 2 borrowed
    expect(page.locator("[data-quote=quota]")).to_contain_text("must borrow 2")
    from scheduling.models import Job

    assert Job.objects.count() == 0  # quoting never submits


def test_logs_of_a_finished_job(login, lab, submit):
    job = submit(lab.alice, name="logged", command=["python", "train.py"])
    _run_and_finish()
    from scheduling.models import AttemptLog, SimPod

    SimPod.objects.all().delete()  # the cluster forgot the pods: the kept log remains
    assert AttemptLog.objects.filter(job=job).exists()
    page = login("alice")
    page.goto(page.url.rstrip("/") + f"/jobs/{job.pk}/")
    page.click("text=Logs")
    page.wait_for_selector("pre#log")
    assert "done" in page.inner_text("pre#log") and "$ python train.py" in page.inner_text("pre#log")
    assert page.locator("nav.tabs a[aria-current=page]").inner_text().startswith("Attempt 1")
    assert "Kept when the attempt ended" in page.inner_text("#log-source")


def test_a_failed_jobs_page_gives_the_hint_of_its_notification(login, lab, submit):
    from scheduling.failure_hints import failure_hint
    from scheduling.models import Job

    job = submit(lab.alice, name="crashes", env={"SIM_EXIT_CODE": "1"})
    _run_and_finish()
    job = Job.objects.get(pk=job.pk)
    assert job.state == "failed"
    page = login("alice")
    page.goto(page.url.rstrip("/") + f"/jobs/{job.pk}/")
    hint = page.locator("#hints li[data-hint]")
    assert hint.count() == 1 and hint.is_visible()
    assert failure_hint(job.reason_code, job.exit_code).advice in hint.inner_text()


def test_the_job_gpu_chart_spans_its_samples(login, lab, submit):
    from django.utils import timezone

    from observability.models import AttemptUsage

    job = submit(lab.alice, name="charted")
    start = timezone.now().timestamp() - 3600
    series = [[start + 60 * i, 40 + (i % 2) * 20, 1000] for i in range(31)]  # 30 minutes, a sample a minute
    AttemptUsage.objects.create(job=job, attempt=1, source="simulated", gpus=1, started_at=timezone.now(),
                                samples=31, mean_util=50, busy_gpus=0.5, series=series, step_s=60)
    page = login("alice")
    page.goto(page.url.rstrip("/") + f"/jobs/{job.pk}/")
    assert "over 30 minutes" in page.inner_text("#gpu-usage")
    xs = [float(p.split(",")[0]) for p in page.locator("svg.gpu-chart polyline").first.get_attribute("points").split()]
    assert xs[0] == 0 and xs[-1] == 480 and xs == sorted(xs) and len(set(xs)) == 31  # drawn across the chart


def test_home_tables_fit_their_cards_with_mig_names(login, lab, submit):
    from quotas.models import Quota
    from scheduling.models import Job, JobState

    Quota.objects.get_or_create(department=lab.vision, flavor=lab.mig, defaults={"nominal": 2})
    for i in range(3):
        Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.mig, name=f"mig-sweep-member-{i}",
                           image="img", command=["x"], gpus_per_pod=1, pods=2, state=JobState.QUEUED)
    for width in (1280, 1024):
        page = login("alice", viewport={"width": width, "height": 900})
        for card in ("#my-jobs", "#quota"):
            box = page.locator(card).bounding_box()
            for th in page.locator(f"{card} th").all():
                edge = th.bounding_box()
                # Every column is inside its card: none clipped ("Lent"), none behind a sideways scroll.
                assert edge["x"] + edge["width"] <= box["x"] + box["width"] + 0.5, (width, card, th.inner_text())
        assert page.locator("#quota th", has_text="Lent").is_visible()
        assert page.locator("#my-jobs th", has_text="Next start").is_visible()
        page.close()


def test_the_member_table_puts_role_tier_and_save_side_by_side_and_no_remove_on_ones_own_row(login, lab):
    page = login("vadmin")
    page.goto(page.url.rstrip("/") + "/lab/departments/vision/")
    row = page.locator("tr[data-member=alice]")
    role, tier, save = (row.locator(x).bounding_box() for x in ("select[name=role]", "select[name=user_tier]",
                                                               "button:has-text('Save')"))
    assert abs(role["y"] - tier["y"]) < 4 and abs(tier["y"] - save["y"]) < 8  # one line, not stacked
    assert role["x"] < tier["x"] < save["x"]
    assert row.locator("button:has-text('Remove')").is_visible()
    own = page.locator("tr[data-member=vadmin]")
    # The portal refuses to let her remove herself or change her own role: the page does not offer it.
    assert own.locator("button").count() == 0 and own.locator("select").count() == 0
    assert "Department admin" in own.inner_text()


def test_token_page(login, lab):
    page = login("alice")
    page.click("nav >> text=Tokens")
    page.fill("input[name=name]", "notebook")
    page.fill("input[name=ttl_days]", "14")
    page.click("button:has-text('Create token')")
    secret = page.inner_text("#token-secret")
    from portal.models import ApiToken

    assert ApiToken.authenticate(secret).name == "notebook"
    page.reload()
    assert page.locator("#token-secret").count() == 0 and "notebook" in page.inner_text("#tokens")
    page.once("dialog", lambda d: d.dismiss())  # asked first; declining keeps the token
    page.click("#tokens button:has-text('Revoke')")
    assert ApiToken.authenticate(secret) is not None
    page.once("dialog", lambda d: d.accept())
    page.click("#tokens button:has-text('Revoke')")
    page.wait_for_selector("text=is revoked")
    assert ApiToken.authenticate(secret) is None


def test_cancel_asks_first_and_the_layout_fits_a_phone(login, lab, submit):
    job = submit(lab.alice, name="keep-me")
    page = login("alice", viewport={"width": 390, "height": 844})
    page.goto(page.url.rstrip("/") + f"/jobs/{job.pk}/")
    page.once("dialog", lambda d: d.dismiss())
    page.click("button:has-text('Cancel job')")
    job.refresh_from_db()
    assert job.state == "queued"
    for path in ("/", "/jobs/", "/cluster/", "/tokens/", "/jobs/new"):
        page.goto(page.url.split("/jobs/")[0].split("/tokens/")[0].split("/cluster/")[0].rstrip("/") + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide at 390"


def test_budget_forms_speak_credits(login, lab):
    from playwright.sync_api import expect

    from quotas.models import Price, Wallet

    Wallet.objects.create(department=lab.vision, balance=100_000)
    page = login("root")
    base = page.url.rstrip("/")
    page.goto(base + "/budgets/prices/")
    page.select_option("select[name=flavor]", "a100-80gb")
    page.select_option("select[name=tier]", "elastic")
    page.fill("input[name=per_gpu_hour]", "1.2345")  # a fourth decimal: refused, in credits
    page.click("button:has-text('Save price')")
    expect(page.locator("[data-error-for=per_gpu_hour]")).to_have_text(
        "Use at most 3 decimals: 0.001 credits is the smallest amount.")
    assert page.input_value("input[name=per_gpu_hour]") == "1.2345"
    page.fill("input[name=per_gpu_hour]", "1.25")
    page.click("button:has-text('Save price')")
    row = page.locator("tr[data-price]", has_text="a100-80gb")
    expect(row).to_contain_text("1.250 cr")
    assert Price.objects.get(flavor=lab.a100, tier="elastic").per_gpu_hour == 1250
    row.locator("a:has-text('Edit')").click()
    assert page.input_value("input[name=per_gpu_hour]") == "1.25"  # what was typed, not 1250
    assert "mcr" not in page.inner_text("main")

    page.goto(base + "/budgets/vision/adjust")
    page.fill("input[name=amount]", "12.345")
    page.fill("input[name=comment]", "grant")
    page.click("button:has-text('Record adjustment')")
    page.wait_for_url("**/budgets/vision/")
    expect(page.locator("#wallet-balance")).to_have_text("112.345 cr")

    page = login("alice")
    page.goto(base + "/jobs/new")
    page.fill("input[name=name]", "bidder")
    page.fill("input[name=image]", "nvcr.io/nvidia/pytorch:24.05-py3")
    page.fill("textarea[name=command]", "python train.py")
    page.fill("input[name=bid]", "2.5")  # above the base price: the worst case a hold covers
    expect(page.locator("[data-quote=cost]")).to_have_text("2.500 cr")
    page.fill("input[name=bid]", "2.5005")
    expect(page.locator("[data-quote-error=bid]")).to_contain_text("at most 3 decimals")
