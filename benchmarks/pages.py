"""How long every list page, API list and the home page take on the configured database, and how many queries
each runs: seed it first (``manage.py seed_scale``, docs/operations.md "Benchmarks").

    DATABASE_URL=postgres://... python -m benchmarks.pages [--repeat 3] [--only jobs]

The routes come from the resolver: every GET route that names nothing (a list, a page), plus a department's
and a wallet's page. Each is requested as a platform admin, a department admin and a researcher through
Django's test client, in this process, so the CPU time printed is the web process's own (Python and the
driver; PostgreSQL's is not counted). Wall time on a shared machine is noise around that; the load average is
printed beside it."""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import URLPattern, URLResolver, get_resolver  # noqa: E402

from portal.models import Membership, Role  # noqa: E402

SKIPPED = ("admin/", "static", "logout", "login", "api/schema", "api/docs", "api/redoc", "metrics", "healthz",
           "readyz", "oidc/", "favicon", "jobs/new", "/live", "whatif")


def routes(patterns=None, prefix: str = "") -> list[str]:
    """Every route of the URLconf with no parameter, as a path."""
    out = []
    for p in get_resolver().url_patterns if patterns is None else patterns:
        part = str(p.pattern).lstrip("^").replace("/?$", "/").rstrip("$")
        if isinstance(p, URLResolver):
            out += routes(p.url_patterns, prefix + part)
        elif isinstance(p, URLPattern) and "<" not in part and "(?P" not in part and "\\." not in part:
            out.append("/" + prefix + part)
    return sorted({r for r in out if not any(s in r for s in SKIPPED)})


def _users() -> dict[str, object]:
    def first(role):
        m = Membership.objects.filter(role=role).select_related("user", "department").order_by("id").first()
        return m
    return {"platform": first(Role.PLATFORM_ADMIN), "dept-admin": first(Role.DEPARTMENT_ADMIN),
            "researcher": first(Role.RESEARCHER)}


def measure(client: Client, url: str, repeat: int) -> tuple[int, int, float, float]:
    """(status, queries, median wall ms, median CPU ms) of GET url."""
    walls, cpus, status, queries = [], [], 0, 0
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as ctx:
            w, c = time.perf_counter(), time.process_time()
            response = client.get(url, HTTP_ACCEPT="application/json" if "/api/" in url else "text/html")
            walls.append((time.perf_counter() - w) * 1000)
            cpus.append((time.process_time() - c) * 1000)
        status, queries = response.status_code, len(ctx.captured_queries)
    return status, queries, statistics.median(walls), statistics.median(cpus)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="only URLs containing this")
    args = parser.parse_args(argv)
    settings.ALLOWED_HOSTS = ["*"]
    logging.getLogger("django.request").setLevel(logging.ERROR)  # the 403s and 405s are expected, and printed
    users = _users()
    slug = users["dept-admin"].department.slug
    urls = [*routes(), f"/lab/departments/{slug}/", f"/budgets/{slug}/", f"/api/v1/wallets/{slug}",
            "/api/v1/jobs?state=queued", "/api/v1/jobs?page=200", "/jobs/?page=100"]
    urls = [u for u in urls if args.only in u]
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
    print(f"{'role':<11} {'url':<44} {'status':>6} {'queries':>7} {'wall ms':>8} {'cpu ms':>7}")
    slow = 0
    for role, m in users.items():
        client = Client()
        client.force_login(m.user)
        for url in urls:
            status, queries, wall, cpu = measure(client, url, args.repeat)
            slow += wall >= 1000
            print(f"{role:<11} {url:<44} {status:>6} {queries:>7} {wall:>8.0f} {cpu:>7.0f}", flush=True)
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}; {slow} answers took 1 s or more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
