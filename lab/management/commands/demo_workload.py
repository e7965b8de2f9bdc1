"""The demo's background submitter (lab/demo_workload.py): ``manage.py demo`` starts it as a supervised child;
SIGTERM or Ctrl-C ends it between two steps."""

from __future__ import annotations

import random
import signal
import sys
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections

from lab.demo_workload import DEFAULT_MAX_QUEUED, DEFAULT_RATE_PER_MIN, DemoWorkload


class Command(BaseCommand):
    help = ("Submit a gentle mix of demo jobs for ever, as the demo's researchers, through the API's submission "
            "service: about RATE a minute, never while MAX_QUEUED jobs wait. `manage.py demo` runs it; "
            "`manage.py demo --no-workload` does not.")

    def add_arguments(self, parser):
        parser.add_argument("--rate", type=float, default=DEFAULT_RATE_PER_MIN,
                            help=f"jobs a minute, on average (default {DEFAULT_RATE_PER_MIN:g})")
        parser.add_argument("--max-queued", type=int, default=DEFAULT_MAX_QUEUED,
                            help="submit nothing while this many jobs of the lab wait (queued or awaiting "
                                 f"approval; default {DEFAULT_MAX_QUEUED})")
        parser.add_argument("--poll-s", type=float, default=1.0, help="seconds between two steps (default 1)")
        parser.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable mix")

    def handle(self, *args, rate, max_queued, poll_s, seed, **opts):
        if rate <= 0 or max_queued < 1 or poll_s <= 0:
            raise CommandError("--rate and --poll-s must be positive and --max-queued at least 1.")
        workload = DemoWorkload(rate_per_min=rate, max_queued=max_queued, rng=random.Random(seed))
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stderr.write(f"demo workload: about {rate:g} jobs a minute, none while {max_queued} wait")
        run(workload, stop, poll_s=poll_s)


def run(workload: DemoWorkload, stop: threading.Event, *, poll_s: float) -> None:
    """Step until ``stop`` is set. A database error (SQLite busy under load, a restarted PostgreSQL) costs one
    step, not the process: the supervisor would restart it anyway, with a back-off and a logged exit."""
    while not stop.is_set():
        try:
            workload.step()
        except DatabaseError as exc:
            print(f"demo workload: step failed: {exc}", file=sys.stderr, flush=True)
        finally:
            close_old_connections()  # as at the end of a request: a long-lived loop must not pin a connection
        stop.wait(poll_s)
