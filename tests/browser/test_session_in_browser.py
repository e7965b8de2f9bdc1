"""A researcher opens a GPU session from its job page in a real browser, through the portal: Connect, the
one-time code traded for the route's cookie, the session proxy asking the forward-auth endpoint, the simulated
pod's stand-in app; then a cell runs over a WebSocket and its answer comes back. Another user gets a 404 from
the proxy. Then a colleague's hostile service page tries to read her notebook, drive its kernel, plant cookies
and learn her portal session, and fails: each route is an origin of its own (s<id>.sessions.localhost, which
Chromium resolves to loopback: no DNS), and the portal, on 127.0.0.1, shares no cookie with any of them.
Drives Debian's Chromium through Playwright; skipped on a laptop without Chromium, required in CI."""

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
    settings.SESSION_DOMAIN, settings.SESSION_PORT = "sessions.localhost", str(port)
    settings.SIM_SESSION_STANDIN = True
    proc = subprocess.Popen([sys.executable, "-m", "portal.session_proxy", "--listen", f"127.0.0.1:{port}",
                             "--portal", live_server.url, "--domain", "sessions.localhost"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # waits for the process to listen, not for a result
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    yield f"http://sessions.localhost:{port}"
    from scheduling.backends.simulated import stop_standins
    from scheduling.models import SimPod

    stop_standins(SimPod.objects.all())
    proc.terminate()
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def _running_session(lab, user=None, **body):
    from scheduling.api.serializers import JobSubmitSerializer
    from scheduling.models import SessionImage
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster
    from scheduling.services.jobs import job_submit

    SessionImage.objects.get_or_create(name="jupyterlab", defaults={
        "image": "quay.io/jupyter/base-notebook:2026", "port": 8888, "readiness_path": "/api/status"})
    s = JobSubmitSerializer(data=body or {"name": "notebook", "kind": "session", "session_image": "jupyterlab",
                                          "flavor": "a100-80gb", "gpus": 1})
    s.is_valid(raise_exception=True)
    job, _ = job_submit(user=user or lab.alice, data=s.validated_data)
    run_cycle()
    deadline = time.monotonic() + 30
    while True:  # waits for the stand-in process to listen, not for a result
        sync_cluster()
        job.refresh_from_db()
        if job.ready or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert job.state == "running" and job.ready
    return job


def test_a_researcher_opens_a_session_and_runs_a_cell_over_a_websocket(login, lab, proxy):
    job = _running_session(lab)
    page = login("alice")
    page.goto(page.url.rsplit("/", 1)[0] + f"/jobs/{job.pk}/")
    route = proxy.replace("://", f"://s{job.pk}.")
    assert page.inner_text("#route-url") == f"{route}/s/{job.pk}/"
    page.click("#connect")
    notebook = page
    notebook.wait_for_selector("body[data-connected=yes]")
    assert notebook.url == f"{route}/s/{job.pk}/"  # the code left the address bar
    notebook.fill("#cell", "6 * 7")
    notebook.click("#run")
    notebook.wait_for_selector("#out:has-text('Out[1]: 42')")
    cookies = {c["name"]: c for c in notebook.context.cookies(f"{route}/s/{job.pk}/")}
    assert cookies["portal_route"]["httpOnly"] and cookies["portal_route"]["path"] == "/"
    assert "sessionid" not in cookies and "csrftoken" not in cookies  # the portal's stay on the portal's host

    # another user, signed in to the portal, gets a 404 from the proxy and from Connect
    other = login("amy")
    answer = other.goto(f"{route}/s/{job.pk}/")
    assert answer.status == 404
    port = int(proxy.rsplit(":", 1)[1])
    request = urllib.request.Request(f"http://127.0.0.1:{port}/s/{job.pk}/",  # loopback, the host in Host
                                     headers={"Host": f"s{job.pk}.sessions.localhost:{port}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310 - our own loopback proxy
    assert refused.value.code == 404


def test_a_hostile_service_page_cannot_read_a_session_plant_cookies_or_learn_the_portal_session(
        browser, live_server, lab, proxy):
    notebook = _running_session(lab)
    hostile = _running_session(lab, user=lab.amy, name="llm", kind="service", image="ghcr.io/amy/serve:1",
                               port=8000, flavor="a100-80gb", gpus=1)
    portal = live_server.url.replace("localhost", "127.0.0.1")  # the demo's portal: no parent of the sessions'
    page = browser.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{portal}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw-alice-long-enough")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Home')")
    page.goto(f"{portal}/jobs/{notebook.pk}/")
    page.click("#connect")
    page.wait_for_selector("body[data-connected=yes]")
    victim = proxy.replace("://", f"://s{notebook.pk}.") + f"/s/{notebook.pk}/"
    portal_session = {c["name"]: c["value"] for c in page.context.cookies(portal)}["sessionid"]

    # alice opens her colleague's service (a member may): its page runs amy's script, on amy's origin
    page.goto(f"{portal}/jobs/{hostile.pk}/")
    page.click("#connect")
    page.wait_for_selector("body[data-connected=yes]")
    assert page.url.startswith(proxy.replace("://", f"://s{hostile.pk}."))
    stolen = page.evaluate("""async ([victim, portal]) => {
        const out = {};
        try { const r = await fetch(victim, {credentials: "include"}); out.read = await r.text(); }
        catch (e) { out.read = "blocked"; }
        try { const r = await fetch(portal + "/api/v1/me", {credentials: "include"}); out.me = await r.text(); }
        catch (e) { out.me = "blocked"; }
        out.kernel = await new Promise((done) => {
            const ws = new WebSocket(victim.replace("http", "ws") + "ws");
            ws.onopen = () => { ws.send(JSON.stringify({cell: "1000 * 7"})); };
            ws.onmessage = (e) => done("ran: " + e.data);
            ws.onerror = () => done("refused");
            ws.onclose = () => done("refused");
        });
        out.visible = document.cookie;
        for (const domain of ["sessions.localhost", "localhost", "127.0.0.1", ""]) {
            const scope = domain ? "; domain=" + domain : "";
            document.cookie = "sessionid=planted; path=/" + scope;
            document.cookie = "csrftoken=planted; path=/" + scope;
            document.cookie = "portal_route=planted; path=/" + scope;
        }
        return out;
    }""", [victim, portal])
    assert stolen["read"] == "blocked" and stolen["me"] == "blocked"  # other origins: nothing to read
    assert stolen["kernel"] == "refused"  # the notebook's WebSocket checks Origin
    assert portal_session not in stolen["visible"] and "sessionid" not in stolen["visible"]

    # nothing planted reached the portal or the notebook: alice is still herself in both
    jar = {c["name"]: c["value"] for c in page.context.cookies(portal)}
    assert jar["sessionid"] == portal_session
    me = page.goto(f"{portal}/api/v1/me")
    assert me.status == 200 and '"alice"' in me.text()
    page.goto(victim)
    page.wait_for_selector("body[data-connected=yes]")
    page.fill("#cell", "6 * 7")
    page.click("#run")
    page.wait_for_selector("#out:has-text('Out[1]: 42')")
