"""The dashboard shell: login, jobs list, submit form (same validation as the API), job page, cancel."""

from __future__ import annotations

import pytest

from scheduling.models import Job

pytestmark = pytest.mark.django_db


def test_login_page_and_redirect(client, lab):
    assert client.get("/").status_code == 302
    r = client.post("/login/", {"username": "alice", "password": "pw-alice-long-enough"})
    assert r.status_code == 302 and r["Location"] == "/"
    page = client.get("/")
    assert page.status_code == 200 and b"alice" in page.content and b"vision" in page.content


def test_wrong_password(client, lab):
    r = client.post("/login/", {"username": "alice", "password": "nope"})
    assert r.status_code == 200 and b"Wrong username or password" in r.content


def test_submit_form_creates_a_job_and_shows_its_page(client, lab):
    client.force_login(lab.alice)
    r = client.post("/jobs/new", {
        "name": "from-form", "image": "pytorch/pytorch:2.3", "command": "python train.py --epochs 3",
        "flavor": "a100-80gb", "gpus": "2", "pods": "1", "cpu": "4", "memory": "16Gi", "tier": "elastic",
        "urgency": "high", "task_type": "train", "max_runtime_s": "1800", "bid": "0", "env": "SEED=1\nLR=0.1",
        "checkpoint_interval_s": "600", "idempotency_key": "form-1",
    })
    assert r.status_code == 302, r.content.decode()[:2000]
    job = Job.objects.get()
    assert (job.name, job.gpus_per_pod, job.urgency, job.env) == ("from-form", 2, "high", {"SEED": "1", "LR": "0.1"})
    assert job.checkpoint_interval_s == 600
    assert job.command == ["/bin/sh", "-c", "python train.py --epochs 3"]
    page = client.get(r["Location"])
    assert b"from-form" in page.content and b"Timeline" in page.content and b"Why is it waiting?" in page.content
    assert b"600 s" in page.content  # the declared checkpoint interval
    # a double-click re-posts the same form: the idempotency key returns the same job
    again = client.post("/jobs/new", {"name": "from-form", "image": "pytorch/pytorch:2.3",
                                      "command": "python train.py --epochs 3", "flavor": "a100-80gb",
                                      "gpus": "2", "pods": "1", "cpu": "4", "memory": "16Gi", "tier": "elastic",
                                      "urgency": "high", "task_type": "train", "max_runtime_s": "1800",
                                      "bid": "0", "env": "SEED=1\nLR=0.1", "checkpoint_interval_s": "600",
                                      "idempotency_key": "form-1"})
    assert again.status_code == 302 and Job.objects.count() == 1


def test_submit_form_shows_field_errors_and_keeps_values(client, lab):
    client.force_login(lab.alice)
    r = client.post("/jobs/new", {"name": "bad", "image": "NOT VALID", "command": "", "flavor": "a100-80gb",
                                  "gpus": "9", "env": "CUDA_VISIBLE_DEVICES=0"})
    assert r.status_code == 400
    html = r.content.decode()
    assert 'data-error-for="image"' in html and 'data-error-for="gpus"' in html
    assert "reserved for the platform" in html and 'value="bad"' in html
    assert Job.objects.count() == 0


def test_cancel_from_the_job_page(client, lab, submit):
    job = submit(lab.alice)
    client.force_login(lab.alice)
    assert b"Cancel job" in client.get(f"/jobs/{job.pk}/").content
    r = client.post(f"/jobs/{job.pk}/cancel")
    assert r.status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled"
    client.force_login(lab.amy)  # same department, not the owner: no button, refused
    assert b"Cancel job" not in client.get(f"/jobs/{job.pk}/").content


def test_cluster_page(client, lab):
    client.force_login(lab.root)
    html = client.get("/cluster/").content.decode()
    # Match the node cell, not the two letters: a CSRF token can contain "n0".
    assert "a100-80gb" in html and "/n0</td>" in html
    client.force_login(lab.alice)
    assert "/n0</td>" not in client.get("/cluster/").content.decode()


def test_static_assets_are_served_by_the_portal(client, lab):
    client.force_login(lab.alice)
    assert client.get("/static/portal/app.css").status_code == 200
    html = client.get("/").content.decode()
    assert "https://" not in html.split("<body>")[0]  # no CDN in <head>


def test_policy_page_shows_weights_and_only_platform_admins_edit(client, lab):
    import json

    from scheduling.models import PolicyVersion
    from scheduling.services.policy import current_policy, policy_as_dict

    client.force_login(lab.alice)
    page = client.get("/policy/")
    assert page.status_code == 200 and b"urgency" in page.content and b"<textarea" not in page.content
    data = policy_as_dict(current_policy()[0])
    assert client.post("/policy/", {"policy": json.dumps(data)}).status_code == 403  # seen, not theirs to edit

    client.force_login(lab.root)
    data["aging_per_minute"] = 3.0
    r = client.post("/policy/", {"policy": json.dumps(data), "comment": "faster aging"})
    assert r.status_code == 302 and PolicyVersion.objects.get().comment == "faster aging"
    assert current_policy()[0].aging_per_minute == 3.0

    bad = client.post("/policy/", {"policy": "{not json"})
    assert bad.status_code == 400 and b"Not valid JSON" in bad.content
    data["aging_per_minute"] = -1
    bad = client.post("/policy/", {"policy": json.dumps(data)})
    assert bad.status_code == 400 and b"aging_per_minute" in bad.content
    assert PolicyVersion.objects.count() == 1


def test_the_policy_page_says_what_the_priority_band_does_and_when_it_is_off(client, lab):
    import json

    from scheduling.services.policy import current_policy, policy_as_dict

    client.force_login(lab.root)
    page = client.get("/policy/")  # the default policy: high and critical work forms the band
    text = " ".join(page.content.decode().split())
    assert "after the jobs of weight 2.0 or more that have waited a quarter of the limit: they form a priority band" in text
    # the matrix marks the band: the six high and critical cells (weights 2.0 to 5.0), not a PI's normal 1.3
    marked = [weight for _, cells in page.context["matrix"] for weight, in_band in cells if in_band]
    assert sorted(marked) == [2.0, 2.3, 2.6, 4.0, 4.5, 5.0]
    assert text.count('class="in-band"') == 6 and 'id="band-legend"' in text
    data = policy_as_dict(current_policy()[0])
    data["priority_band_weight"] = 0
    assert client.post("/policy/", {"policy": json.dumps(data), "comment": "one band"}).status_code == 302
    assert current_policy()[0].priority_band_weight == 0.0
    off = " ".join(client.get("/policy/").content.decode().split())
    assert "The priority band is off (<code>priority_band_weight</code> 0)" in off
    assert 'class="in-band"' not in off and 'id="band-legend"' not in off
    data["priority_band_weight"] = -1
    bad = client.post("/policy/", {"policy": json.dumps(data)})
    assert bad.status_code == 400 and b"priority_band_weight" in bad.content
