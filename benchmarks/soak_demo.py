"""Soak the embedded default: ``manage.py demo`` under a steady stream of REST submissions, optionally with
every core kept busy, then check that no worker or beat died and that every job finished.

    python -m benchmarks.soak_demo [--minutes 60] [--every-s 10] [--load-cores 2] [--drain-minutes 10]

The demo runs on a fresh DATA_DIR (SQLite, the filesystem broker, the simulated cluster; DATABASE_URL,
CELERY_BROKER_URL and REDIS_URL are ignored) and serves on 127.0.0.1 only. Researchers of three departments
take turns submitting 1-2 GPU jobs of 1-20 simulated minutes (SIM_SPEEDUP 60: 1-20 s). Figures: submissions,
jobs per final state, worker/beat exits from the demo's supervisor (DATA_DIR/demo-processes.json),
"Unrecoverable error" lines in the demo's log, and readiness answers that were not 200. Exits 1 when a
process died, a job did not finish, or the demo stopped answering. Nothing here is a test: it prints figures.
The demo's own background submitter is off (``--no-workload``), so the load is this stream alone and the
figures stay comparable between runs; ``--demo-workload`` keeps it on as well.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBMITTERS = ("bob", "dave", "erin")
TERMINAL = {"succeeded", "failed", "cancelled", "rejected", "preempted"}


def _burn(until: float) -> None:
    while time.time() < until:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(method: str, url: str, token: str | None = None, body: dict | None = None, timeout: float = 30):
    req = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
        url, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - 127.0.0.1 only
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _token(env: dict, username: str) -> str:
    code = ("from django.contrib.auth import get_user_model; from portal.models import ApiToken; "
            f"print(ApiToken.issue(user=get_user_model().objects.get(username={username!r}), name='soak', "
            "ttl_days=2)[1])")
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    return out.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60.0, help="how long to submit (default 60)")
    p.add_argument("--every-s", type=float, default=10.0, help="seconds between submissions (default 10)")
    p.add_argument("--load-cores", type=int, default=0, help="busy loops to run meanwhile (default 0)")
    p.add_argument("--drain-minutes", type=float, default=10.0, help="then wait this long for the jobs to end")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--demo-workload", action="store_true",
                   help="keep the demo's own background submitter running too (off by default)")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.every_s <= 0 or args.load_cores < 0 or args.drain_minutes < 0:
        p.error("--minutes and --every-s must be positive, --load-cores and --drain-minutes not negative")

    rng = random.Random(args.seed)
    data = Path(tempfile.mkdtemp(prefix="soak-demo-"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER")}
    env.update(DATA_DIR=str(data), PYTHONUNBUFFERED="1")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = data / "demo.log"
    print(f"soak: DATA_DIR={data}, demo log {log_path}", flush=True)
    demo_argv = [sys.executable, "manage.py", "demo", f"127.0.0.1:{port}",
                 *([] if args.demo_workload else ["--no-workload"])]
    demo = subprocess.Popen(demo_argv, cwd=ROOT, env=env,
                            stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    burners: list[multiprocessing.Process] = []
    submitted: list[int] = []
    refused: dict[int, int] = {}
    not_ready = 0
    ok = True
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if _http("GET", f"{base}/healthz", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if demo.poll() is not None:
                print("soak: the demo exited before serving", file=sys.stderr)
                return 1
            time.sleep(1)
        tokens = {u: _token(env, u) for u in SUBMITTERS}
        end = time.time() + args.minutes * 60
        burners = [multiprocessing.Process(target=_burn, args=(end,), daemon=True) for _ in range(args.load_cores)]
        for b in burners:
            b.start()
        i = 0
        next_at = time.monotonic()
        while time.time() < end:
            user = SUBMITTERS[i % len(SUBMITTERS)]
            body = {"name": f"soak-{i}", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "t.py"],
                    "flavor": "a100-80gb", "gpus": rng.choice([1, 1, 2]), "tier": rng.choice(["elastic", "backfill"]),
                    "max_runtime_s": rng.randint(60, 1200)}
            try:
                status, answer = _http("POST", f"{base}/api/v1/jobs", tokens[user], body)
                if status == 201:
                    submitted.append(answer["id"])
                else:
                    refused[status] = refused.get(status, 0) + 1
                if _http("GET", f"{base}/readyz", timeout=10)[0] != 200:
                    not_ready += 1
            except OSError as exc:
                refused[0] = refused.get(0, 0) + 1
                print(f"soak: request failed: {exc}", file=sys.stderr)
            i += 1
            if i % 30 == 0:
                print(f"soak: {len(submitted)} submitted, {_processes(data)}", flush=True)
            next_at += args.every_s
            time.sleep(max(0.0, next_at - time.monotonic()))
        for b in burners:
            b.terminate()
        states = _drain(base, tokens, submitted, time.monotonic() + args.drain_minutes * 60)
        procs = json.loads((data / "demo-processes.json").read_text())
        exits = {name: s["exits"] for name, s in procs.items()}
        unrecoverable = log_path.read_text(errors="replace").count("Unrecoverable error")
        counts: dict[str, int] = {}
        for s in states.values():
            counts[s] = counts.get(s, 0) + 1
        unfinished = sum(n for s, n in counts.items() if s not in TERMINAL)
        print(json.dumps({"minutes": args.minutes, "load_cores": args.load_cores, "submitted": len(submitted),
                          "refused": refused, "final_states": counts, "unfinished": unfinished,
                          "process_exits": exits, "unrecoverable_errors_in_log": unrecoverable,
                          "readyz_not_200": not_ready}, indent=1))
        ok = not unfinished and not any(exits.values()) and not unrecoverable and len(submitted) > 0
    finally:
        for b in burners:
            b.terminate()
        demo.terminate()
        try:
            demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
    print("soak: OK" if ok else "soak: FAILED", flush=True)
    return 0 if ok else 1


def _processes(data: Path) -> str:
    try:
        procs = json.loads((data / "demo-processes.json").read_text())
    except (OSError, ValueError):
        return "processes: unknown"
    return ", ".join(f"{n}: {s['starts']} start(s), {len(s['exits'])} exit(s)" for n, s in procs.items())


def _drain(base: str, tokens: dict[str, str], ids: list[int], until: float) -> dict[int, str]:
    states: dict[int, str] = {}
    owner = {}
    for n, pk in enumerate(ids):
        owner[pk] = tokens[SUBMITTERS[n % len(SUBMITTERS)]]
    while True:
        for pk in ids:
            if states.get(pk) in TERMINAL:
                continue
            try:
                status, job = _http("GET", f"{base}/api/v1/jobs/{pk}", owner[pk])
                states[pk] = job["state"] if status == 200 else f"http-{status}"
            except OSError:
                states[pk] = "unreachable"
        left = [pk for pk in ids if states.get(pk) not in TERMINAL]
        if not left or time.monotonic() >= until:
            return states
        print(f"soak: waiting for {len(left)} job(s) to end", flush=True)
        time.sleep(10)


if __name__ == "__main__":
    raise SystemExit(main())
