"""A stalled scheduler shows: /readyz says when the last admission cycle completed (from its record in the
database) and is not ready past CYCLE_STALE_AFTER_S; platform admins see a banner on every page."""

from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse

from portal import metrics
from portal.models import MetricValue

pytestmark = pytest.mark.django_db


def _last_cycle_ago(seconds: float) -> None:
    MetricValue.objects.filter(name=metrics.CYCLE_LAST_RUN).update(value=time.time() - seconds)


def _ago(text: str) -> int:
    """The N of "last admission cycle N s ago" (the test's own steps take a moment on a busy machine)."""
    return int(re.fullmatch(r"last admission cycle (\d+) s ago", text).group(1))


def test_readiness_reports_the_last_cycle_and_fails_once_it_is_too_old(lab, client, settings):
    from scheduling.services.cycle import run_cycle

    settings.CYCLE_STALE_AFTER_S = 120
    body = client.get("/readyz").json()
    assert body["status"] == "ok" and body["scheduler"] == "no admission cycle has completed yet"  # fresh

    assert run_cycle() is not None
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"]["scheduler"] == "ok"
    assert _ago(r.json()["scheduler"]) < 60

    _last_cycle_ago(100)  # a few missed cycles: still ready
    assert client.get("/readyz").status_code == 200

    _last_cycle_ago(300)  # the worker or beat died
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["status"] == "error"
    assert 300 <= _ago(r.json()["scheduler"]) < 360
    assert r.json()["reason"] == f"scheduler: {r.json()['scheduler']}, stalled past 120 s"

    run_cycle()  # it runs again
    assert client.get("/readyz").status_code == 200


def test_the_web_replicas_probe_excludes_the_scheduler_and_still_reports_it(lab, client, settings, monkeypatch):
    """What deploy/base/web.yaml's readiness probe asks: a stalled scheduler is "degraded" (200) there, so the
    Service keeps its web replicas and a platform admin can still reach the banner; a dead database is not."""
    from portal import views
    from scheduling.services.cycle import run_cycle

    settings.CYCLE_STALE_AFTER_S = 120
    run_cycle()
    _last_cycle_ago(300)
    assert client.get("/readyz").status_code == 503
    r = client.get("/readyz?exclude=scheduler")
    assert r.status_code == 200
    body = r.json()
    assert (body["status"], body["excluded"]) == ("degraded", ["scheduler"]) and "reason" not in body
    assert body["checks"]["scheduler"].startswith("error: last admission cycle ")
    assert 300 <= _ago(body["scheduler"]) < 360

    run_cycle()
    assert client.get("/readyz?exclude=scheduler").json()["status"] == "ok"
    monkeypatch.setitem(views.READINESS_CHECKS, "database", _down)
    r = client.get("/readyz?exclude=scheduler")
    assert r.status_code == 503 and r.json()["reason"] == "database: RuntimeError"


def _down():
    raise RuntimeError("the database is down")


def test_excluding_a_check_that_does_not_exist_is_a_400(client, db):
    r = client.get("/readyz?exclude=schedular")
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("exclude: no check named schedular; the checks are database, ")


def test_a_threshold_of_zero_never_fails_readiness(lab, client, settings):
    from scheduling.services.cycle import run_cycle

    settings.CYCLE_STALE_AFTER_S = 0
    run_cycle()
    _last_cycle_ago(10_000)
    r = client.get("/readyz")
    assert r.status_code == 200 and _ago(r.json()["scheduler"]) >= 10_000


def _page_client(user):
    from django.test import Client

    c = Client()
    c.force_login(user)
    return c


def test_platform_admins_see_a_banner_while_the_scheduler_is_stalled(lab, settings):
    from scheduling.services.cycle import run_cycle

    settings.CYCLE_STALE_AFTER_S = 120
    run_cycle()
    root, alice = _page_client(lab.root), _page_client(lab.alice)
    assert 'id="scheduler-stalled"' not in root.get("/").content.decode()
    _last_cycle_ago(600)
    page = root.get("/").content.decode()
    assert 'id="scheduler-stalled"' in page
    assert 600 <= int(re.search(r"last admission cycle (\d+) s ago", page).group(1)) < 660
    assert 'id="scheduler-stalled"' in root.get(reverse("dashboard:jobs")).content.decode()  # the shell: every page
    assert 'id="scheduler-stalled"' not in alice.get("/").content.decode()  # only who can act on it
