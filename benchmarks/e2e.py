"""End-to-end control-plane benchmark through the real stack.

REST submissions over HTTP (threaded Django server) -> PostgreSQL -> Celery workers + beat over Redis ->
admission cycles -> simulated cluster backend -> completions. The shape follows Kueue's published baseline:
15,000 jobs in 3 size classes across 30 departments. Reports admissions per second and time-to-admission per
class (Kueue's baseline: about 43 admissions/s, 351 s for the 15,000).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal_bench \
    CELERY_BROKER_URL=redis://127.0.0.1:6379/14 python -m benchmarks.e2e [--jobs 15000] [--batch 50]

``--batch 1`` (the default) sends one POST /api/v1/jobs per job: the single-request figure. ``--batch N``
sends each department's jobs through POST /api/v1/jobs/batch, N at a time. Either way every job counts
against its user's submit rate (120 jobs/min by default); a 429 is retried after its Retry-After.

``--backend kubernetes`` runs the same stack on the Kubernetes backend against the cluster in ``KUBECONFIG``
(plus ``manage.py watch_pods``), after measuring the bare kube-scheduler on the same control plane: N plain
1-GPU pods created by as many clients, pods/s until the last is bound. Then N portal jobs of 1 GPU each
(``--shape single``, the default there) are submitted over REST, and the report sets the portal's admitted-and-
bound jobs/s beside the bare scheduler's pods/s (target: at least 0.5x). The cluster needs GPU nodes (or nodes
advertising the ``--gpu-resource``, e.g. a fake device plugin) and pulls ``--image``; the run creates namespaces
``gpe-<run>-*`` and deletes them at the end.

    DATABASE_URL=... CELERY_BROKER_URL=redis://... KUBECONFIG=~/.kube/config \
        python -m benchmarks.e2e --backend kubernetes --jobs 500 --batch 50 --node-label gpu-type=a100

``--fake-kube`` runs the Kubernetes path without a cluster: it starts the fake API server the tests use as a
process of its own (``python -m tests.fakes.serve``: ``--nodes`` nodes of 8 GPUs, a stand-in kube-scheduler and
kubelet that bind and start every ungated pod), points KUBECONFIG at it, and counts every process of the stack as
the simulated run does, so the portal's own CPU per job on the Kubernetes path is measured here. The fake's own
CPU is reported apart (it is not the portal's), and there is no bare-scheduler baseline (the fake binds at once).

    DATABASE_URL=... CELERY_BROKER_URL=redis://... python -m benchmarks.e2e --backend kubernetes --fake-kube \
        --jobs 300 --batch 50 --nodes 40

To compare the two backends per process, give both runs the same ``--hold-s`` (the stack stays up that many
seconds after the first submission, so both count the same seconds of their per-second costs) and ``--shape
single`` (the simulated pods then run ``--job-seconds`` of real time, as the Kubernetes ones do); the report's
CPU from the first submission leaves each process's start-up out. ``E2E_PROFILE_DIR=DIR`` runs every process
but the web under cProfile (``benchmarks/profiled.py``: every thread) and writes ``DIR/<process>.prof``.

The database named in DATABASE_URL is dropped and re-created. Nothing here is a test: it prints figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

from django.db import connection

from benchmarks import proc_cpu
from benchmarks.workers import drain

ROOT = Path(__file__).resolve().parent.parent
CLASSES = {  # name: (share of jobs, pods, GPUs per pod, simulated seconds)
    "small": (0.6, 1, 1, 60),
    "medium": (0.3, 1, 4, 120),
    "large": (0.1, 2, 8, 180),
}


def main() -> None:
    args = _parse_args()
    kube = args.backend == "kubernetes"
    node_label = tuple(args.node_label.split("=", 1)) if args.node_label else None
    db = os.environ.get("DATABASE_URL", "")
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not db.startswith("postgres") or not broker.startswith("redis"):
        sys.exit("set DATABASE_URL=postgres://... and CELERY_BROKER_URL=redis://... (the real stack)")
    recreate_database(db)
    run = os.urandom(3).hex()
    fake = None
    if args.fake_kube:
        from benchmarks import e2e_kube  # the Kubernetes client: only with --backend kubernetes

        fake = e2e_kube.start_fake(ROOT, port=args.fake_kube_port, nodes=args.nodes, gpu_resource=args.gpu_resource,
                                   node_label=args.node_label)
    env = _environment(args, run)
    os.environ.update(env)
    _run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env)

    import django

    django.setup()
    tokens = seed_lab(args.departments, args.nodes, kube=kube, gpu_resource=args.gpu_resource, node_label=node_label,
                   users=args.users)
    _flush_broker(broker)
    baseline, core, namespaces = None, None, []
    if kube:
        from benchmarks import e2e_kube  # the Kubernetes client: only with --backend kubernetes

        core = e2e_kube.api(os.environ["KUBECONFIG"])
        namespaces = [f"gpe-{run}-dept-{d:02d}" for d in range(args.departments)]
        if fake is None:
            baseline = _bare_baseline(args, core, run, namespaces, node_label)
        else:
            e2e_kube.create_namespaces(core, namespaces)
    connection.close()  # the backend that seeded is not counted: polling gets a new one
    procs = _start_stack(args, env, kube)
    try:
        with proc_cpu.DatabaseBackends(urlparse(db).path.lstrip("/")) as postgres:
            _wait_http(f"http://127.0.0.1:{args.port}/healthz")
            _wait_for_nodes(args.timeout)
            at_start = {name: proc_cpu.cpu_ms(p.pid) for name, p in zip(_names(args, kube), procs, strict=True)}
            result = _drive(args, tokens, core=core, namespaces=namespaces)
            if args.hold_s and time.time() < result["start"] + args.hold_s:  # runs of equal length
                time.sleep(result["start"] + args.hold_s - time.time())
            result["held"] = time.time() - result["start"]
        result["cpu"] = {name: proc_cpu.cpu_ms(p.pid) for name, p in zip(_names(args, kube), procs, strict=True)}
        result["cpu_run"] = {name: ms - at_start[name] for name, ms in result["cpu"].items()}
        result["cpu"]["postgres"] = postgres.cpu_ms()
        if fake is not None:
            result["fake_cpu"] = proc_cpu.cpu_ms(fake.pid)
    finally:
        _stop(procs)
        if fake is not None:  # the fake's namespaces go with it
            _stop([fake])
        elif kube:
            e2e_kube.delete_namespaces(core, [f"gpe-{run}-bare", *namespaces])
    report = _report(args, result) + (_kube_report(args, result, baseline) if kube else "")
    print(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=15000)
    ap.add_argument("--departments", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=250, help="simulated nodes of 8 A100 each")
    ap.add_argument("--submitters", type=int, default=8, help="concurrent HTTP clients")
    ap.add_argument("--users", type=int, default=1,
                    help="submitting users per department, each with its own token: every user may submit "
                         "120 jobs a minute (the product's default), so departments x users x 2 jobs/s caps "
                         "the run's submissions, and the report says so")
    ap.add_argument("--batch", type=int, default=1,
                    help="jobs per request: 1 = one POST /api/v1/jobs per job (default); N > 1 = POST "
                         "/api/v1/jobs/batch with N jobs of one department each")
    ap.add_argument("--workers", type=int, default=2, help="Celery pod worker processes")
    ap.add_argument("--cycle-workers", type=int, default=2,
                    help="processes on the cycle queue (the admission cycle, the sync and the reconcile), the "
                         "first with beat: one per cluster plus one, as docs/operations.md says to run it")
    ap.add_argument("--web", choices=("gunicorn", "runserver"), default=None,
                    help="web server (default: gunicorn when installed, as in production; else runserver)")
    ap.add_argument("--web-workers", type=int, default=3, help="gunicorn worker processes (as deploy/base)")
    ap.add_argument("--port", type=int, default=8799)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--hold-s", type=float, default=0,
                    help="keep the stack running until this many seconds after the first submission before its CPU "
                         "is read, so that two runs (simulated and Kubernetes) count the same seconds of their "
                         "per-second costs (a sync every CYCLE_INTERVAL_S, beat, polling)")
    ap.add_argument("--out", default="reports/e2e.md")
    ap.add_argument("--backend", choices=("simulated", "kubernetes"), default="simulated",
                    help="kubernetes: the cluster in KUBECONFIG, with the bare scheduler's rate as the baseline")
    ap.add_argument("--shape", choices=("kueue", "single"), default=None,
                    help="kueue: the 3 size classes above; single: every job 1 pod x 1 GPU (default on kubernetes, "
                         "the bare baseline's shape)")
    ap.add_argument("--gpu-resource", default="nvidia.com/gpu", help="kubernetes: the GPU resource nodes advertise")
    ap.add_argument("--node-label", default="", help="kubernetes: key=value the GPU nodes carry (the flavor's label)")
    ap.add_argument("--image", default="busybox:1.36", help="kubernetes: the pods' image")
    ap.add_argument("--job-seconds", type=int, default=600, help="how long each pod runs (kubernetes: its sleep; simulated with --shape single: its simulated run, at the speed-up, so that both backends run the same real seconds)")
    ap.add_argument("--baseline-clients", type=int, default=8, help="kubernetes: concurrent creators of bare pods")
    ap.add_argument("--fake-kube", action="store_true",
                    help="kubernetes: start the fake API server as a process (--nodes x 8 GPUs) instead of KUBECONFIG")
    ap.add_argument("--fake-kube-port", type=int, default=8861, help="kubernetes: the fake API server's port")
    args = ap.parse_args()
    kube = args.backend == "kubernetes"
    args.shape = args.shape or ("single" if kube else "kueue")
    if args.fake_kube and not kube:
        ap.error("--fake-kube is for --backend kubernetes")
    if kube and not args.fake_kube and not os.environ.get("KUBECONFIG"):
        ap.error("--backend kubernetes needs KUBECONFIG (a real cluster), or --fake-kube (the fake API server)")
    if not 1 <= args.batch <= 500:
        ap.error("--batch must be between 1 and 500 (JOBS_BATCH_MAX)")
    if args.web is None:
        args.web = "gunicorn" if importlib.util.find_spec("gunicorn") else "runserver"
    return args


def _environment(args, run: str) -> dict[str, str]:
    """The environment of every process of the stack (and of this one)."""
    env = {
        **os.environ,
        "DATA_DIR": tempfile.mkdtemp(prefix="portal-e2e-"),
        "SIM_SPEEDUP": "120",
        "CYCLE_INTERVAL_S": "1",
        # Persistent connections (the production default) with gunicorn's sync workers; runserver starts a
        # thread per request, so there every request has to open its own connection.
        "DB_CONN_MAX_AGE": "0" if args.web == "runserver" else "60",
        "RECONCILE_INTERVAL_S": "600",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "ALLOWED_HOSTS": "127.0.0.1",
    }
    if args.backend == "kubernetes":
        env.update(SCHEDULING_BACKEND="kubernetes", KUBE_NAMESPACE_TEMPLATE=f"gpe-{run}-{{department}}",
                   RECONCILE_INTERVAL_S="60")
    return env


def _bare_baseline(args, core, run: str, namespaces: list[str], node_label) -> dict:
    """The bare kube-scheduler's rate on the same control plane, measured before the portal runs."""
    from benchmarks import e2e_kube  # the Kubernetes client: only with --backend kubernetes

    e2e_kube.create_namespaces(core, [f"gpe-{run}-bare", *namespaces])
    baseline = e2e_kube.bare_scheduler_rate(
        core, namespace=f"gpe-{run}-bare", pods=args.jobs, clients=args.baseline_clients, image=args.image,
        seconds=args.job_seconds, gpu_resource=args.gpu_resource, node_label=node_label, timeout=args.timeout)
    e2e_kube.delete_and_wait(core, f"gpe-{run}-bare", "bench=bare")  # the portal gets an empty cluster
    return baseline


def _start_stack(args, env: dict[str, str], kube: bool) -> list[subprocess.Popen]:
    """The web server, the pod workers, the cycle worker with beat (and the pod watch on Kubernetes)."""
    if args.web == "gunicorn":  # what the image and deploy/base run
        web = [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{args.port}",
               "--workers", str(args.web_workers), "--backlog", "256"]
    else:
        web = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{args.port}", "--noreload"]
    celery = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-l", "WARNING"]
    names = iter(_names(args, kube))
    profile_dir = os.environ.get("E2E_PROFILE_DIR", "")

    def start(cmd: list[str], **kw) -> subprocess.Popen:
        name = next(names)
        if profile_dir and name != "web":  # gunicorn's workers are forked: a profile of its master says nothing
            cmd = [sys.executable, "-m", "benchmarks.profiled", str(Path(profile_dir) / f"{name}.prof"), *cmd[1:]]
        return subprocess.Popen(cmd, cwd=ROOT, env=env, **kw)

    procs = [start(web, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for i in range(args.workers):
        procs.append(start([*celery, "-Q", "starts,pods,default", "-c", "4", "--pool=threads", "-n", f"pods{i}@%h"]))
    # delivery apart from the pod work, as docker-compose's notifier
    procs.append(start([*celery, "-Q", "notifications", "-c", "2", "--pool=threads", "-n", "notifier@%h"]))
    procs.append(start([*celery, "-B", "-Q", "cycle", "-c", "1", "--pool=solo", "-n", "cycle@%h",
                        "-s", str(Path(env["DATA_DIR"]) / "beat")]))
    for i in range(1, args.cycle_workers):  # the cycle queue's other processes, as docs/operations.md says to run it
        procs.append(start([*celery, "-Q", "cycle", "-c", "1", "--pool=solo", "-n", f"cycle{i}@%h"]))
    if kube:  # pod states come back through the watch, as in production
        procs.append(start([sys.executable, "manage.py", "watch_pods"]))
    return procs


def _names(args, kube: bool) -> list[str]:
    """The processes of ``_start_stack``, in its order."""
    return (["web"] + [f"pods{i}" for i in range(args.workers)] + ["notifier", "cycle+beat"]
            + [f"cycle{i}" for i in range(1, args.cycle_workers)] + (["watch_pods"] if kube else []))


def _cpu_lines(r) -> list[str]:
    """CPU ms per admitted job, per process of the stack and for the PostgreSQL backends of its database (this
    benchmark's own polling included; Redis not counted): in all, and from the first submission on (without
    each process's start-up: imports, Django setup, the first sync), to the end of the run (``--hold-s``)."""
    admitted = max(1, len(r["rows"]))
    cpu = r.get("cpu") or {}
    run = r.get("cpu_run") or {}
    stack = {name: ms for name, ms in cpu.items() if name != "postgres"}
    rows = [*((name, ms, run.get(name, 0.0)) for name, ms in stack.items()),
            ("all", sum(stack.values()), sum(run.values()))]
    if "postgres" in cpu:
        rows += [("PostgreSQL backends", cpu["postgres"], float("nan")),
                 ("all + PostgreSQL", sum(cpu.values()), float("nan"))]
    held = r.get("held") or 0.0
    return ["", f"CPU from the first submission: over the {held:.0f} s from it to the end of the run.", "",
            "| process | CPU s | CPU ms per admitted job | from the first submission: CPU s | ms per job |",
            "|---|---|---|---|---|",
            *[f"| {name} | {ms / 1000:.1f} | {ms / admitted:.1f} | {r_ms / 1000:.1f} | {r_ms / admitted:.1f} |"
              for name, ms, r_ms in rows], ""]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()


def _run(cmd, env):
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def recreate_database(url: str) -> None:
    import psycopg

    u = urlparse(url)
    name = u.path.lstrip("/")
    admin = url.replace(f"/{name}", "/postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _flush_broker(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def seed_lab(departments: int, nodes: int, *, kube: bool = False, gpu_resource: str = "nvidia.com/gpu",
          node_label: tuple[str, str] | None = ("gpu-type", "a100"), users: int = 1) -> list[str]:
    from django.contrib.auth import get_user_model

    from portal.models import ApiToken, Department, Membership
    from quotas.models import Flavor, Quota
    from scheduling.models import Cluster, Node

    if kube:  # the nodes come from the cluster's inventory; the flavor names what they advertise
        a100 = Flavor.objects.create(name="a100-80gb", resource_name=gpu_resource,
                                     node_labels=dict([node_label]) if node_label else {})
        Cluster.objects.create(name="default", is_default=True, backend="kubernetes")
        share = 100_000  # the cluster's capacity bounds admissions; quotas do not get in the way
    else:
        a100 = Flavor.objects.create(name="a100-80gb", node_labels={"gpu-type": "a100"})
        cluster = Cluster.objects.create(name="default", is_default=True)
        Node.objects.bulk_create(
            [
                Node(cluster=cluster, name=f"sim-{i:04d}", flavor=a100, gpus=8, labels={"gpu-type": "a100"})
                for i in range(nodes)
            ]
        )
        share = nodes * 8 // departments
    tokens = []
    User = get_user_model()
    for d in range(departments):
        dept = Department.objects.create(slug=f"dept-{d:02d}", name=f"Department {d}")
        Quota.objects.create(department=dept, flavor=a100, nominal=share, borrowing_limit=None)
        for u in range(users):
            user = User.objects.create_user(username=f"user{d:02d}" + (f"-{u}" if u else ""), password=None)
            Membership.objects.create(user=user, department=dept)
            tokens.append(ApiToken.issue(user=user, name="bench")[1])
    # users interleaved across departments, so that consecutive jobs go to different departments
    return [tokens[d * users + u] for u in range(users) for d in range(departments)]


def _wait_for_nodes(timeout: float) -> None:
    """Until the portal knows some node: on Kubernetes the nodes come with the cluster's first sync, and until
    then every job is refused (400: no node of its flavor), which the submitters retried, each retry counted
    against the user's submit rate until it answered 429."""
    from scheduling.models import Node

    end = time.monotonic() + timeout
    while not Node.objects.exists():
        if time.monotonic() > end:
            raise SystemExit("the portal stored no node: is the cluster reachable?")
        time.sleep(0.5)
    connection.close()


def _wait_http(url: str, timeout: float = 300) -> None:  # gunicorn starts slowly on a loaded machine
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(url, timeout=2)  # noqa: S310 - loopback only
            return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not come up")


def _drive(args, tokens: list[str], *, core=None, namespaces=()) -> dict:
    submit = _Submitter(args, _requests_plan(args, tokens))
    start = time.time()
    drain(submit.plan, submit.send, threads=args.submitters)
    submitted_at = time.time()
    bound = _wait_for_admissions(args, start, len(submit.errors), core=core, namespaces=namespaces)
    finished = time.time()
    rows = _admission_rows()
    # Admitted -> started, per attempt: the longest gap. An attempt started when its job was first seen running;
    # a short job that ran and ended between two syncs is first seen ended (its end bounds its start from
    # above), and one not seen either way by the end of the run counts to the end of the run (still waiting).
    with connection.cursor() as cur:
        cur.execute("""SELECT max(coalesce(s.at, %s) - a.at), count(*) FILTER (WHERE s.at IS NULL)
            FROM scheduling_jobevent a LEFT JOIN LATERAL (
                SELECT min(r.at) AS at FROM scheduling_jobevent r WHERE r.job_id = a.job_id
                AND r.attempt = a.attempt AND r.to_state IN ('running', 'succeeded', 'failed') AND r.at >= a.at
            ) s ON true
            WHERE a.to_state = 'admitted'""", [datetime.fromtimestamp(finished, tz=UTC)])
        gap, not_started = cur.fetchone()
    submitted = {}
    if core is not None:
        with connection.cursor() as cur:
            cur.execute("SELECT id, submitted_at FROM scheduling_job")
            submitted = {pk: at.timestamp() for pk, at in cur.fetchall()}
    connection.close()
    return {
        "start": start,
        "submitted": submitted_at,
        "finished": finished,
        "errors": submit.errors,
        "submit_latency": submit.lat,
        "throttled": len(submit.throttled),
        "rows": rows,
        "bound": bound,
        "submitted_at": submitted,
        "start_gap": (gap.total_seconds() if gap else float("nan"), not_started),
    }


def _requests_plan(args, tokens: list[str]) -> list[list[tuple]]:
    """The jobs (seeded) grouped into requests: one request per job, or batches of up to args.batch jobs of
    one user (a batch is one user's request), departments interleaved."""
    rng = random.Random(7)
    plan = []
    names = list(CLASSES)
    weights = [CLASSES[n][0] for n in names]
    for i in range(args.jobs):
        name = "small" if args.shape == "single" else rng.choices(names, weights)[0]
        _share, pods, gpus, sim_s = CLASSES[name]
        plan.append((i, name, pods, gpus, sim_s, tokens[i % len(tokens)]))
    if args.batch == 1:
        return [[item] for item in plan]
    requests_plan: list[list[tuple]] = []
    by_token: dict[str, list[tuple]] = {}
    for item in plan:
        by_token.setdefault(item[5], []).append(item)
    chunks = [
        [items[k:k + args.batch] for k in range(0, len(items), args.batch)] for items in by_token.values()
    ]
    for round_ in range(max(len(c) for c in chunks)):  # interleave departments, as single mode does
        requests_plan += [c[round_] for c in chunks if round_ < len(c)]
    return requests_plan


class _Submitter:
    """The requests of concurrent HTTP clients (``benchmarks.workers.drain``); each request is retried after a
    429's Retry-After and up to 5 times on other failures."""

    def __init__(self, args, requests_plan: list[list[tuple]]):
        self.args = args
        self.base = f"http://127.0.0.1:{args.port}/api/v1/jobs"
        self.lock = threading.Lock()  # the clients' shared lists
        self.plan = requests_plan
        self.errors: list[str] = []
        self.lat: list[float] = []
        self.throttled: list[int] = []

    def job_body(self, item) -> dict:
        args = self.args
        i, cls, pods, gpus, sim_s, _token = item
        if args.backend == "kubernetes":
            return {"name": f"{cls}-{i}", "image": args.image, "command": ["sh", "-c", f"sleep {args.job_seconds}"],
                    "flavor": "a100-80gb", "gpus": gpus, "pods": pods, "max_runtime_s": 3600,
                    "cpu": "100m", "memory": "128Mi"}
        if args.shape == "single":  # as on Kubernetes: every pod runs --job-seconds of real time
            sim_s = args.job_seconds * int(os.environ.get("SIM_SPEEDUP") or 1)
        return {
            "name": f"{cls}-{i}",
            "image": "ghcr.io/lab/bench:1",
            "command": ["sleep", "1"],
            "flavor": "a100-80gb",
            "gpus": gpus,
            "pods": pods,
            "max_runtime_s": max(3600, sim_s * 2),
            "env": {"SIM_DURATION_S": str(sim_s)},
        }

    def send(self, items: list[tuple]) -> None:
        first, token = items[0][0], items[0][5]
        if self.args.batch == 1:
            url, body, key = self.base, self.job_body(items[0]), f"bench-{first}"
        else:
            url, body, key = f"{self.base}/batch", {"jobs": [self.job_body(it) for it in items]}, f"bench-b{first}"
        req = urllib.request.Request(  # noqa: S310 - loopback only
            url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Idempotency-Key": key,
            },
        )
        t0 = time.perf_counter()
        failures = 0
        while True:
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - loopback only
                    resp.read()
                break
            except Exception as exc:  # noqa: BLE001
                retry_after = exc.headers.get("Retry-After") if getattr(exc, "code", None) == 429 else None
                if retry_after:  # over the user's submit rate: wait as told (no header: never fits)
                    with self.lock:
                        self.throttled.append(first)
                        if len(self.throttled) <= 3:
                            print(f"429 for request {first} (token {token[:6]}, after {failures} failures, "
                                  f"{time.perf_counter() - t0:.1f} s): Retry-After {retry_after}; "
                                  f"{exc.read()[:300]!r}", file=sys.stderr)
                    time.sleep(float(retry_after))
                    continue
                failures += 1
                body = exc.read()[:300] if hasattr(exc, "read") else b""
                print(f"request {first} failed ({failures}) after {time.perf_counter() - t0:.1f} s: {exc!r} {body!r}",
                      file=sys.stderr)
                if failures == 5:
                    with self.lock:
                        self.errors.extend([str(exc)] * len(items))
                    break
                time.sleep(0.2 * failures)
        self.lat.append(time.perf_counter() - t0)


def _count_admitted() -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM scheduling_job WHERE admitted_at IS NOT NULL OR state IN "
            "('admitted','running','succeeded')"
        )
        return cur.fetchone()[0]


def _wait_for_admissions(args, start: float, errors: int, *, core, namespaces) -> dict[int, float]:
    """Poll until every submitted job is admitted (on a cluster: its pod bound to its node) or the timeout;
    the pods' bind times on Kubernetes."""
    bound: dict[int, float] = {}
    while time.time() - start < args.timeout:
        if core is not None:  # admitted is not enough on a cluster: the pod must be bound to its node
            from benchmarks import e2e_kube  # the Kubernetes client: only with --backend kubernetes

            bound = e2e_kube.portal_bind_times(core, list(namespaces))
            if len(bound) >= args.jobs - errors:
                break
            time.sleep(2)
            continue
        if _count_admitted() >= args.jobs - errors:
            break
        time.sleep(1)
    return bound


def _admission_rows():
    """(class, seconds from submission to first admission) per job, from the timeline."""
    with connection.cursor() as cur:
        cur.execute("""
            SELECT split_part(j.name, '-', 1), extract(epoch FROM min(e.at) - j.submitted_at), min(e.at)
            FROM scheduling_job j JOIN scheduling_jobevent e ON e.job_id = j.id AND e.to_state = 'admitted'
            GROUP BY j.id, j.name, j.submitted_at""")
        return cur.fetchall()


def _pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _submit_cap(args) -> str:
    """What the per-user submit rate allows this run: a run whose admissions approach it measures the throttle,
    not the control plane."""
    from django.conf import settings
    from rest_framework.throttling import SimpleRateThrottle

    rate = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["submit"]
    count, seconds = SimpleRateThrottle.parse_rate(None, rate)
    users = args.departments * args.users
    return (f"the submit rate ({rate} per user, {users} users) caps submissions at "
            f"{users * count / seconds:.1f} jobs/s")


def _report(args, r) -> str:
    rows = r["rows"]
    admitted = len(rows)
    first = r["start"]
    last = max((row[2].timestamp() for row in rows), default=first)
    span = max(1e-9, last - first)
    mode = ("one POST /api/v1/jobs per job" if args.batch == 1
            else f"POST /api/v1/jobs/batch, {args.batch} jobs of one department per request")
    lines = [
        "# End-to-end control-plane benchmark",
        "",
        f"Submission mode: **{mode}** (`--batch {args.batch}`).",
        "",
        f"{args.jobs} jobs over REST ({args.submitters} concurrent clients, bearer tokens, idempotency keys; "
        + (f"gunicorn, {args.web_workers} sync workers" if args.web == "gunicorn" else "threaded runserver")
        + "), "
        f"{args.departments} departments, "
        + ("the Kubernetes backend on the cluster in KUBECONFIG (its nodes; plus the pod watcher)"
           if args.backend == "kubernetes" else f"{args.nodes} simulated nodes x 8 A100")
        + f", PostgreSQL + Redis + Celery ({args.workers} pod workers x 4 threads, {args.cycle_workers} processes on "
        "the cycle queue, the first with beat every 1 s)" + (", simulated backend at 120x" if args.backend != "kubernetes" else "") + ". "
        + ("Every job 1 pod x 1 GPU." if args.shape == "single"
           else "Classes: small 1x1 GPU (60%), medium 1x4 GPUs (30%), large 2x8 GPUs gang (10%)."),
        "",
        f"- submitted in {r['submitted'] - first:.1f} s ({args.jobs / max(1e-9, r['submitted'] - first):.1f} "
        f"submissions/s; p50 {_pct(r['submit_latency'], 0.5) * 1000:.0f} ms, p95 "
        f"{_pct(r['submit_latency'], 0.95) * 1000:.0f} ms, p99 {_pct(r['submit_latency'], 0.99) * 1000:.0f} ms "
        f"per request, {len(r['submit_latency'])} requests); {len(r['errors'])} failed submissions, "
        f"{r['throttled']} answers 429 (retried after Retry-After); {_submit_cap(args)}",
        f"- admitted {admitted} of {args.jobs} in {span:.1f} s from the first submission: "
        f"**{admitted / span:.1f} admissions/s** (Kueue's published baseline: ~43/s, 351 s for 15,000)",
        f"- longest gap from admission to started pods: {r['start_gap'][0]:.1f} s (a job first seen ended counts to "
        f"its end; {r['start_gap'][1]} admitted attempts neither seen running nor ended when the run ended, "
        "counted to its end)",
        "",
        "| class | jobs | time to admission p50 (s) | p90 | p95 | p99 | max |",
        "|---|---|---|---|---|---|---|",
    ]
    for cls in (*CLASSES, "all"):
        waits = [float(w) for c, w, _ in rows if c == cls or cls == "all"]
        if waits:
            lines.append(
                f"| {cls} | {len(waits)} | {statistics.median(waits):.1f} | {_pct(waits, 0.9):.1f} | "
                f"{_pct(waits, 0.95):.1f} | {_pct(waits, 0.99):.1f} | {max(waits):.1f} |"
            )
    return "\n".join(lines + _cpu_lines(r)) + "\n"


def _kube_report(args, r, baseline) -> str:
    bound, submitted = r["bound"], r["submitted_at"]
    first = float(int(r["start"]))  # lastTransitionTime has whole seconds: compare like with like
    last = max(bound.values(), default=first)
    rate = len(bound) / max(1e-9, last - first)
    waits = [at - submitted[j] for j, at in bound.items() if j in submitted]
    if baseline is None:  # the fake API server: no kube-scheduler to compare with
        return "\n".join([
            "", "## On the fake API server (`--fake-kube`: no cluster, a stand-in scheduler that binds at once)", "",
            f"{len(bound)} of {args.jobs} jobs admitted and bound in {last - first:.1f} s: **{rate:.1f} jobs/s**. "
            f"Submission to bound: p50 {_pct(waits, 0.5):.1f} s, p90 {_pct(waits, 0.9):.1f} s, "
            f"max {max(waits, default=float('nan')):.1f} s. The fake API server's own CPU (not the portal's, not "
            f"in the table above): {r.get('fake_cpu', 0) / 1000:.1f} s.", ""])
    ratio = rate / baseline["per_s"] if baseline and baseline["per_s"] else float("nan")
    return "\n".join([
        "",
        "## On Kubernetes (the cluster in KUBECONFIG)",
        "",
        "| | pods or jobs | bound | seconds | per second |",
        "|---|---|---|---|---|",
        f"| bare kube-scheduler: plain 1-GPU pods, {args.baseline_clients} creating clients | {baseline['pods']} | "
        f"{baseline['bound']} | {baseline['seconds']:.1f} | **{baseline['per_s']:.1f} pods/s** |",
        f"| the portal: 1-GPU jobs over REST, admitted and bound | {args.jobs} | {len(bound)} | "
        f"{last - first:.1f} | **{rate:.1f} jobs/s** |",
        "",
        f"Ratio: **{ratio:.2f}x** the bare scheduler (target: at least 0.5x). Time from submission to bound: "
        f"p50 {_pct(waits, 0.5):.1f} s, p90 {_pct(waits, 0.9):.1f} s, max {max(waits, default=float('nan')):.1f} s.",
        "",
    ])


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
