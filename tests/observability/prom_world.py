"""Helpers: a real Prometheus on loopback, scraping a stand-in dcgm-exporter (http.server in a thread) every second.

The exporter serves dcgm-exporter's metric names, labelled with the pod and namespace of the test's pods (set
by the test through ``exporter.gpus``). Prometheus is Debian's ``prometheus`` binary, started per test module
with a temporary configuration and storage on a free port; no mock of its HTTP API. Skipped on a laptop
without the binary; required in CI (CI=true), where .ci/run installs it like chromium.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(binary: str | None, name: str) -> str:
    if binary is None:
        if IN_CI:
            pytest.fail(f"CI needs Debian's prometheus package ({name}): apt-get install -y prometheus")
        pytest.skip(f"no {name} on this machine (apt-get install -y prometheus)")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Exporter:
    """Serves ``gpus``: a list of dicts {pod, namespace, gpu, util, fb_used, fb_free, engine_active}; ``vgpus``,
    HAMi's vGPU monitor's per-container series, dicts {pod, namespace, container, vdevice, uuid, util,
    used_bytes, limit_bytes}, under both its long-standing names and its hami_* names; then ``text``, more
    exposition text (a test serves the portal's own /metrics through it)."""

    def __init__(self):
        self.gpus: list[dict] = []
        self.vgpus: list[dict] = []
        self.text = ""
        self.lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def render(self) -> str:
        lines = []
        with self.lock:
            gpus, vgpus, text = list(self.gpus), list(self.vgpus), self.text
        for metric, field in (("DCGM_FI_DEV_GPU_UTIL", "util"), ("DCGM_FI_DEV_FB_USED", "fb_used"),
                              ("DCGM_FI_DEV_FB_FREE", "fb_free"), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "engine_active")):
            lines.append(f"# TYPE {metric} gauge")
            for g in gpus:
                if field in g:
                    lines.append(f'{metric}{{gpu="{g["gpu"]}",UUID="GPU-{g["pod"]}-{g["gpu"]}",'
                                 f'modelName="NVIDIA A100-SXM4-80GB",Hostname="n0",pod="{g["pod"]}",'
                                 f'namespace="{g["namespace"]}",container="main"}} {g[field]}')
        for legacy, current, field in (
                ("Device_utilization_desc_of_container", "hami_container_device_utilization_ratio", "util"),
                ("vGPU_device_memory_usage_in_bytes", "hami_vgpu_memory_used_bytes", "used_bytes"),
                ("vGPU_device_memory_limit_in_bytes", "hami_vgpu_memory_limit_bytes", "limit_bytes")):
            lines += [f"# TYPE {legacy} gauge", f"# TYPE {current} gauge"]
            for v in vgpus:
                if field not in v:
                    continue
                lines.append(f'{legacy}{{podnamespace="{v["namespace"]}",podname="{v["pod"]}",'
                             f'ctrname="{v["container"]}",vdeviceid="{v["vdevice"]}",deviceuuid="{v["uuid"]}",'
                             f'zone="vGPU"}} {v[field]}')
                lines.append(f'{current}{{namespace="{v["namespace"]}",pod="{v["pod"]}",'
                             f'container="{v["container"]}",vdevice_index="{v["vdevice"]}",'
                             f'device_uuid="{v["uuid"]}"}} {v[field]}')
        return "\n".join(lines) + "\n" + text

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    def __init__(self, binary: str, target_port: int):
        self.dir = Path(tempfile.mkdtemp(prefix="prom-test-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (self.dir / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: dcgm\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = open(self.dir / "prometheus.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited: " + (self.dir / "prometheus.log").read_text()[-2000:])
            try:
                if requests.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("prometheus did not become ready within 30 s")

    def query(self, query: str) -> list:
        """The instant vector ``query`` gives now, through the HTTP API."""
        return requests.get(self.url + "/api/v1/query", params={"query": query}, timeout=2).json()["data"]["result"]

    def wait_for(self, query: str, *, count: int = 1, timeout: float = 30) -> list:
        """Wait until ``query`` returns at least ``count`` series (scrapes have landed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(query)
            if len(result) >= count:
                return result
            time.sleep(0.3)
        raise AssertionError(f"{query} never returned {count} series")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


