"""One /metrics gives every series: the scheduler's, observed in another process (a Celery worker), read
from the database at scrape time; and per-process counters summed over all web workers (multiprocess
mode), so consecutive scrapes of a counter never go down."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def _value(text: str, series: str) -> float:
    m = re.search(rf"^{re.escape(series)} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{series} not in /metrics"
    return float(m.group(1))


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    if connection.vendor == "postgresql":  # the other process must use the test database
        s = connection.settings_dict
        env["DATABASE_URL"] = f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    env.update(CELERY_TASK_ALWAYS_EAGER="true", **extra)
    return env


def _in_another_process(code: str, **env) -> None:
    script = "import django; django.setup()\n" + code
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(DJANGO_SETTINGS_MODULE="portal.settings",
                   **env), check=True, timeout=120)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_cycle_run_in_a_worker_process_shows_on_the_web_processes_metrics(lab, submit, client):
    for i in range(3):
        submit(lab.alice, name=f"m{i}")
    big = submit(lab.bob, name="big", gpus=4, pods=2)
    type(big).objects.filter(pk=big.pk).update(pods=3)  # cannot fit (grown after submission): stays pending
    _in_another_process("from scheduling.services.cycle import run_cycle; assert run_cycle().admitted == 3")
    first = client.get("/metrics").content.decode()
    assert _value(first, "portal_cycle_duration_seconds_count") == 1
    assert _value(first, "portal_cycle_duration_seconds_sum") > 0
    assert _value(first, 'portal_admissions_total{tier="elastic"}') == 3
    assert _value(first, 'portal_gpus_used{flavor="a100-80gb"}') == 3
    assert _value(first, 'portal_gpus_total{flavor="a100-80gb"}') == 8
    assert re.search(r'^portal_pending_jobs\{reason="[a-z_]+"\} 1\.0$', first, re.M)
    _in_another_process("from scheduling.services.cycle import run_cycle; run_cycle()")
    second = client.get("/metrics").content.decode()
    assert _value(second, "portal_cycle_duration_seconds_count") == 2  # monotonic, whoever scrapes
    assert _value(second, 'portal_admissions_total{tier="elastic"}') == 3


@pytest.mark.django_db
def test_request_counters_are_summed_over_all_web_worker_processes(lab, client, tmp_path, monkeypatch):
    code = ("from django.test import Client\n"
            "c = Client()\n"
            "for _ in range({n}): assert c.get('/login/', HTTP_HOST='localhost').status_code == 200\n")
    for n in (3, 4):  # two "gunicorn workers", each counting its own requests into the shared directory
        _in_another_process(code.format(n=n), PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    series = 'django_http_responses_total_by_status_view_method_total{method="GET",status="200",view="login"}'
    scrapes = [_value(client.get("/metrics").content.decode(), series) for _ in range(3)]
    assert scrapes == [7.0, 7.0, 7.0]


@pytest.mark.django_db
def test_gpus_used_reads_zero_on_every_scrape_when_nothing_is_used(lab, submit, client):
    """Scraped 20 times while a job comes and goes: every scrape has the series of every known flavor, at 0
    when no job holds a GPU of it (a vanished series is "no data" to Prometheus, not 0)."""
    from quotas.models import Flavor
    from scheduling.models import Job, JobState

    Flavor.objects.create(name="h100", resource_name="nvidia.com/gpu")  # no node, no job: 0 and 0
    job = submit(lab.alice, gpus=2)
    for i in range(20):
        running = i % 3 == 0
        Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING if running else JobState.SUCCEEDED)
        text = client.get("/metrics").content.decode()
        assert _value(text, 'portal_gpus_used{flavor="a100-80gb"}') == (2 if running else 0), i
        assert _value(text, 'portal_gpus_used{flavor="h100"}') == 0
        assert _value(text, 'portal_gpus_total{flavor="h100"}') == 0
        assert _value(text, 'portal_gpus_total{flavor="a100-80gb"}') == 8
