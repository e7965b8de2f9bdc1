"""What one admission cycle and one sync of the simulated cluster cost, in process, at a given depth of queue.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal_depth \
        python -m benchmarks.cycle_depth --waiting 1000 --cycles 8

The database named in DATABASE_URL is dropped and re-created. The run seeds the end-to-end benchmark's
cluster (250 simulated nodes x 8 A100, 30 departments) and submits ``--waiting`` jobs plus what the cluster
holds (the e2e mix: 60% 1 GPU, 30% 4 GPUs, 10% gangs of 2 x 8) through the submission service, pods created at
submission as the simulated backend does. Warm-up cycles fill the cluster; then each measured round

1. submits ``--submit`` more jobs (one batch, not measured),
2. makes the pods of ``--ends`` running jobs finish (their runtime set to zero),
3. syncs the cluster (``inventory.sync_one``: the pods' ends move their jobs), measured,
4. runs one admission cycle (``cycle.run_cycle``), measured; with ``--workers 2`` two cycle workers (each
   with its own kept rows) take turns, as the e2e stack's two cycle processes do.

Each measured step gives this process's CPU time (``time.process_time``), its PostgreSQL backend's CPU time
(from /proc, the server being on this machine), its queries and the job rows the cycle read in full. Celery
tasks run eagerly, but those the measured steps send (admissions' pod starts, notifications) run after the
measurement, as another process's work would. The load average is printed beside each round.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    args = _args()
    db = os.environ.get("DATABASE_URL", "")
    if not db.startswith("postgres"):
        sys.exit("set DATABASE_URL=postgres://... (the cycle keeps rows only on PostgreSQL)")
    from benchmarks.e2e import recreate_database

    recreate_database(db)
    os.environ.update({"SIM_SPEEDUP": "1", "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING",
                       "DJANGO_SETTINGS_MODULE": "portal.settings", "DB_CONN_MAX_AGE": "600"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from benchmarks.e2e import seed_lab

    seed_lab(args.departments, args.nodes, users=1)
    rng = random.Random(args.seed)
    users = _users()
    t = time.monotonic()
    _submit(users, args.waiting + args.fill, rng)
    print(f"seeded {args.waiting + args.fill} jobs in {time.monotonic() - t:.0f} s", flush=True)
    for _ in range(args.warmup):
        _round(args, users, rng, measured=False)
    rows = [_round(args, users, rng, measured=True) for _ in range(args.cycles)]
    _report(args, rows)


def _args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--waiting", type=int, default=1000, help="jobs left waiting once the cluster is full")
    p.add_argument("--fill", type=int, default=700, help="jobs more, which the cluster admits in the warm-up")
    p.add_argument("--cycles", type=int, default=8, help="measured rounds")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--submit", type=int, default=50, help="jobs submitted per round")
    p.add_argument("--ends", type=int, default=15, help="running jobs that end per round")
    p.add_argument("--nodes", type=int, default=250)
    p.add_argument("--departments", type=int, default=30)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workers", type=int, default=1,
                   help="cycle workers taking turns (each with its own kept rows, as separate processes have)")
    p.add_argument("--profile", help="write a cProfile of the measured cycles (not the syncs) to this file")
    return p.parse_args()


def _users():
    from django.contrib.auth import get_user_model

    return list(get_user_model().objects.filter(username__startswith="user").order_by("username"))


def _submit(users, count: int, rng: random.Random) -> None:
    """``count`` jobs of the e2e mix, in batches of 50 per user, users in turn."""
    from benchmarks.e2e import CLASSES
    from scheduling.api.serializers import JobBatchSubmitSerializer
    from scheduling.services.jobs import job_submit_batch

    names = list(CLASSES)
    weights = [CLASSES[n][0] for n in names]
    done, turn = 0, 0
    while done < count:
        n = min(50, count - done)
        items = []
        for _ in range(n):
            name = rng.choices(names, weights)[0]
            _share, pods, gpus, sim_s = CLASSES[name]
            items.append({"name": f"{name}-{done}", "image": "ghcr.io/lab/bench:1", "command": ["sleep", "1"],
                          "flavor": "a100-80gb", "gpus": gpus, "pods": pods, "max_runtime_s": 3600,
                          "env": {"SIM_DURATION_S": str(sim_s * 1000)}})  # ended by the rounds, not by time
            done += 1
        s = JobBatchSubmitSerializer(data={"jobs": items})
        s.is_valid(raise_exception=True)
        job_submit_batch(user=users[turn % len(users)], items=s.validated_data["jobs"])
        turn += 1


def _end_some(count: int, rng: random.Random) -> None:
    from scheduling.models import Job, JobState, SimPod

    running = list(Job.objects.filter(state=JobState.RUNNING).values_list("pk", "attempt"))
    for pk, attempt in rng.sample(running, min(count, len(running))):
        SimPod.objects.filter(job_id=pk, attempt=attempt).update(runtime_s=0)


class _Held:
    """The messages a measured step sends (``portal.broker.send``), held and sent after the measurement."""

    def __enter__(self):
        from portal import broker

        self.broker, self.original, self.held = broker, broker.send, []
        broker.send = lambda task, *a: self.held.append((task, a))
        return self

    def __exit__(self, *exc):
        self.broker.send = self.original

    def release(self):
        for task, a in self.held:
            self.original(task, *a)


def _backend_cpu_ms() -> float:
    from django.db import connection

    from benchmarks.proc_cpu import own_cpu_ms

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    return own_cpu_ms(pid) or 0.0


def _measure(fn, profile=None) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    pg0 = _backend_cpu_ms()
    with _Held() as held, CaptureQueriesContext(connection) as q:
        c0 = time.process_time()
        if profile is not None:
            profile.enable()
        fn()
        if profile is not None:
            profile.disable()
        cpu = (time.process_time() - c0) * 1000
    pg = _backend_cpu_ms() - pg0
    held.release()
    return {"cpu": cpu, "pg": pg, "queries": len(q.captured_queries)}


PROFILE = None
WORKERS: list = []
ROUNDS: list = []


def _round(args, users, rng, *, measured: bool) -> dict:
    from scheduling.models import Cluster, Job, JobState
    from scheduling.services import cycle, inventory
    from scheduling.services.job_rows import JobRows

    global PROFILE
    if args.profile and measured and PROFILE is None:
        import cProfile

        PROFILE = cProfile.Profile()
    _submit(users, args.submit, rng)
    _end_some(args.ends, rng)
    cluster = Cluster.objects.get(name="default")
    if args.workers > 1:  # this round's worker: its own kept rows, as another process would have
        WORKERS.extend(JobRows() for _ in range(args.workers - len(WORKERS)))
        cycle.ROWS = WORKERS[ROUNDS.append(1) or len(ROUNDS) % args.workers]
    sync = _measure(lambda: inventory.sync_one(cluster_id=cluster.pk))
    outcome = {}
    cyc = _measure(lambda: outcome.update(o=cycle.run_cycle()), PROFILE if measured else None)
    o = outcome["o"]
    row = {"load": os.getloadavg()[0], "waiting": Job.objects.filter(state=JobState.QUEUED).count(),
           "admitted": o.admitted if o else 0, "fetched": cycle.ROWS.fetched,
           **{f"sync_{k}": v for k, v in sync.items()}, **{f"cycle_{k}": v for k, v in cyc.items()}}
    if measured:
        print("  ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    return row


def _report(args, rows) -> None:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"\nwaiting {med['waiting']:.0f} (median of {len(rows)} rounds), load {rows[0]['load']:.1f} -> "
          f"{rows[-1]['load']:.1f}; per round, medians:")
    print(f"  cycle: {med['cycle_cpu']:.0f} ms CPU + {med['cycle_pg']:.0f} ms PostgreSQL, "
          f"{med['cycle_queries']:.0f} queries, {med['fetched']:.0f} rows read in full, {med['admitted']:.0f} admitted")
    print(f"  sync:  {med['sync_cpu']:.0f} ms CPU + {med['sync_pg']:.0f} ms PostgreSQL, "
          f"{med['sync_queries']:.0f} queries")
    if PROFILE is not None:
        PROFILE.dump_stats(args.profile)


if __name__ == "__main__":
    main()
