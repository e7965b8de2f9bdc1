"""Refresh docs/screenshots/: run `manage.py demo` on a fresh data directory (its worker and beat move the
demo jobs and write the charts' samples, every few seconds here), let the simulated cluster run for a while,
then log in as each demo role in Debian's Chromium (Playwright) and photograph each main page.

    make screenshots            # or: .venv/bin/python tools/screenshots.py [--warmup 90] [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
# (file, user, path, what to do on the page before the picture)
SHOTS = [
    ("home-researcher", "bob", "/", None),
    ("home-department-admin", "alice", "/", None),
    ("home-platform-admin", "admin", "/", "charts"),
    ("jobs", "alice", "/jobs/", None),
    ("submit-with-quote", "bob", "/jobs/new", "quote"),
    ("cluster", "admin", "/cluster/", None),
    ("job", "alice", "job", None),
    ("logs", "alice", "logs", None),
    ("tokens", "bob", "/tokens/", None),
    ("approvals", "alice", "/budgets/approvals/", None),
    ("not-found", "bob", "/jobs/999999/", None),
    ("phone-jobs", "alice", "/jobs/", "phone"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):  # noqa: S310 - our own loopback server
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the demo did not answer at {url} within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=float, default=90.0, help="seconds the demo runs before the pictures")
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    opts = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    data_dir = Path(tempfile.mkdtemp(prefix="portal-shots-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DATA_DIR": str(data_dir), "STATS_INTERVAL_S": "5", "DATABASE_URL": "",
           "CELERY_BROKER_URL": "", "REDIS_URL": "", "DEBUG": "false"}
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", f"127.0.0.1:{port}"], cwd=ROOT, env=env,  # noqa: S603
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_ready(url)
        creds = json.loads((data_dir / "demo-credentials.json").read_text())
        print(f"demo at {url}; letting the simulated cluster run {opts.warmup:.0f} s")
        time.sleep(opts.warmup)
        out = Path(opts.out)
        out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=ARGS)
            for name, user, path, action in SHOTS:
                phone = action == "phone"
                page = browser.new_page(viewport={"width": 390, "height": 844} if phone else
                                        {"width": 1280, "height": 900})
                page.set_default_timeout(20_000)
                page.goto(url + "/login/")
                page.fill("input[name=username]", user)
                page.fill("input[name=password]", creds[user])
                page.click("button[type=submit]")
                page.wait_for_selector("h1")
                if path in ("job", "logs"):
                    page.goto(url + "/jobs/?mine=1")
                    # the newest job that has run, so its page has a timeline and logs: the demo's background
                    # workload keeps adding queued jobs that would come first
                    page.click("table.jobs tbody tr[data-job]:has(.state-running, .state-succeeded) a")
                    page.wait_for_selector("#job-state")
                    if path == "logs":
                        page.click("text=Logs")
                        page.wait_for_selector("pre#log")
                else:
                    page.goto(url + path)
                if action == "charts":
                    page.wait_for_selector("canvas[data-plotted], [data-chart-empty]")
                if action == "quote":
                    page.fill("input[name=name]", "resnet50-sweep")
                    page.fill("input[name=image]", "nvcr.io/nvidia/pytorch:24.05-py3")
                    page.fill("textarea[name=command]", "python train.py --epochs 10")
                    page.fill("input[name=gpus]", "2")
                    page.wait_for_selector("[data-quote=cost]")
                page.screenshot(path=str(out / f"{name}.png"), full_page=True)
                print(f"  {name}.png ({user} {path})")
                page.close()
            browser.close()
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        try:
            demo.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
