"""Run the whole portal on embedded defaults: SQLite, filesystem broker, simulated 8 x A100 cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = ("Migrate, seed demo data, start a Celery worker with beat, and serve the portal on ADDRPORT "
            "(default 127.0.0.1:8000; e.g. `manage.py demo 0.0.0.0:8080` to serve other machines, which then "
            "also need ALLOWED_HOSTS).")

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000", metavar="ADDRPORT",
                            help="Address and port to serve on, as [address:]port (default 127.0.0.1:8000), "
                                 "exactly as runserver takes it.")
        parser.add_argument("--no-worker", action="store_true", help="Do not start the Celery worker/beat.")
        parser.add_argument("--seed-only", action="store_true", help="Seed and exit.")

    def handle(self, *args, addrport, no_worker, seed_only, **opts):
        from lab.demo import seed

        call_command("migrate", interactive=False, verbosity=0)
        creds = seed()
        self.stdout.write(self.style.SUCCESS("Demo data ready: 3 departments, an 8 x A100 simulated cluster."))
        self.stdout.write("Users (username / password / role):")
        from lab.demo import USERS

        for username, dept, role, tier in USERS:
            self.stdout.write(f"  {username:<6} {creds[username]:<14} {role} in {dept} ({tier})")
        if seed_only:
            return
        worker = None
        if not no_worker:
            worker = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
                [sys.executable, "-m", "celery", "-A", "portal", "worker", "-B", "--pool=threads",
                 "--concurrency=4", "-Q", "default,cycle,pods", "--loglevel=WARNING"],
                # charts fill in within minutes in a demo (production samples every 5 minutes)
                env={**os.environ, "STATS_INTERVAL_S": os.environ.get("STATS_INTERVAL_S", "30")},
            )
        self.stdout.write(self.style.SUCCESS(f"\nOpen http://{addrport}/ (API docs at http://{addrport}/api/docs/)\n"))
        try:
            call_command("runserver", addrport, use_reloader=False)
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    worker.kill()
