"""A researcher opens a GPU session from its job page in a real browser, through the portal: Connect, the
one-time code traded for the route's cookie, the session proxy asking the forward-auth endpoint, the simulated
pod's stand-in app; then a cell runs over a WebSocket and its answer comes back. Another user gets a 404 from
the proxy. Drives Debian's Chromium through Playwright; skipped on a laptop without Chromium, required in CI."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def proxy(live_server, settings):
    """The session proxy in front of the live portal, and the simulated cluster running stand-in apps."""
    port = _free_port()
    settings.SESSION_URL = f"http://127.0.0.1:{port}"
    settings.SIM_SESSION_STANDIN = True
    proc = subprocess.Popen([sys.executable, "-m", "portal.session_proxy", "--listen", f"127.0.0.1:{port}",
                             "--portal", live_server.url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # waits for the process to listen, not for a result
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    yield settings.SESSION_URL
    from scheduling.backends.simulated import stop_standins
    from scheduling.models import SimPod

    stop_standins(SimPod.objects.all())
    proc.terminate()
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def _running_session(lab):
    from scheduling.api.serializers import JobSubmitSerializer
    from scheduling.models import SessionImage
    from scheduling.services.clusters import sync_cluster
    from scheduling.services.cycle import run_cycle
    from scheduling.services.jobs import job_submit

    SessionImage.objects.create(name="jupyterlab", image="quay.io/jupyter/base-notebook:2026", port=8888,
                                readiness_path="/api/status")
    s = JobSubmitSerializer(data={"name": "notebook", "kind": "session", "session_image": "jupyterlab",
                                  "flavor": "a100-80gb", "gpus": 1})
    s.is_valid(raise_exception=True)
    job, _ = job_submit(user=lab.alice, data=s.validated_data)
    run_cycle()
    sync_cluster()
    job.refresh_from_db()
    assert job.state == "running" and job.ready
    return job


def test_a_researcher_opens_a_session_and_runs_a_cell_over_a_websocket(login, lab, proxy):
    job = _running_session(lab)
    page = login("alice")
    page.goto(page.url.rsplit("/", 1)[0] + f"/jobs/{job.pk}/")
    assert page.inner_text("#route-url") == f"{proxy}/s/{job.pk}/"
    page.click("#connect")
    notebook = page
    notebook.wait_for_selector("body[data-connected=yes]")
    assert notebook.url == f"{proxy}/s/{job.pk}/"  # the code left the address bar
    notebook.fill("#cell", "6 * 7")
    notebook.click("#run")
    notebook.wait_for_selector("#out:has-text('Out[1]: 42')")
    cookies = {c["name"]: c for c in notebook.context.cookies(f"{proxy}/s/{job.pk}/")}
    assert cookies[f"portal_s{job.pk}"]["httpOnly"] and cookies[f"portal_s{job.pk}"]["path"] == f"/s/{job.pk}/"

    # another user, signed in to the portal, gets a 404 from the proxy and from Connect
    other = login("amy")
    answer = other.goto(f"{proxy}/s/{job.pk}/")
    assert answer.status == 404
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{proxy}/s/{job.pk}/", timeout=10)  # noqa: S310 - our own loopback proxy
    assert refused.value.code == 404
