"""Run the whole portal on embedded defaults: SQLite, filesystem broker, simulated 8 x A100 cluster; the worker
and beat are supervised children (portal/supervisor.py)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from lab.demo import USERS, seed
from portal.supervisor import Child, Supervisor


class Command(BaseCommand):
    help = ("Migrate, seed demo data, start a supervised Celery worker and beat, and serve the portal on ADDRPORT "
            "(default 127.0.0.1:8000; e.g. `manage.py demo 0.0.0.0:8080` to serve other machines, which then "
            "also need ALLOWED_HOSTS).")

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000", metavar="ADDRPORT",
                            help="Address and port to serve on, as [address:]port (default 127.0.0.1:8000), "
                                 "exactly as runserver takes it.")
        parser.add_argument("--no-worker", action="store_true", help="Do not start the Celery worker/beat.")
        parser.add_argument("--seed-only", action="store_true", help="Seed and exit.")

    def handle(self, *args, addrport, no_worker, seed_only, **opts):
        call_command("migrate", interactive=False, verbosity=0)
        creds = seed()
        self.stdout.write(self.style.SUCCESS("Demo data ready: 3 departments, an 8 x A100 simulated cluster."))
        self.stdout.write("Users (username / password / role):")
        for username, dept, role, tier in USERS:
            self.stdout.write(f"  {username:<6} {creds[username]:<14} {role} in {dept} ({tier})")
        if seed_only:
            return
        # SIGTERM (docker stop, systemd, kill) ends the demo like Ctrl-C: the server returns and the finally
        # below stops the worker and beat, which were left running on the same database otherwise. Both are
        # handled from before the first child starts, so a signal at any moment takes the children along.
        # SIGINT too: a demo started from a background shell or nohup inherits SIGINT ignored, and Ctrl-C or a
        # signal from its parent would then do nothing.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        previous_int = signal.signal(signal.SIGINT, _interrupt)
        supervisor = None
        try:
            if not no_worker:
                supervisor = Supervisor(background_processes(addrport), status_path=Path(settings.DATA_DIR) / STATUS_FILE)
                supervisor.start()
            self.stdout.write(self.style.SUCCESS(
                f"\nOpen http://{addrport}/ (API docs at http://{addrport}/api/docs/; sessions at "
                f"{settings.SESSION_URL}/s/<job id>/)\n"))
            call_command("runserver", addrport, use_reloader=False)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
            if supervisor is not None:
                supervisor.stop()

STATUS_FILE = "demo-processes.json"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def background_processes(addrport: str = "127.0.0.1:8000") -> list[Child]:
    """The worker and beat as two processes, so either is started again alone and beat never outlives a
    worker it was embedded in. Beat holds a pid file: a second demo on the same DATA_DIR cannot run a second
    beat (it exits, is logged, and is tried again after its back-off). The session proxy carries sessions'
    HTTP and WebSocket traffic at SESSION_URL (docs/sessions.md), asking the portal at ``addrport``."""
    celery = [sys.executable, "-m", "celery", "-A", "portal"]
    # charts fill in within minutes in a demo (production samples every 5 minutes)
    env = {**os.environ, "STATS_INTERVAL_S": os.environ.get("STATS_INTERVAL_S", "30")}
    return [
        Child("worker", [*celery, "worker", "--pool=threads", "--concurrency=4", "-Q", "default,cycle,pods,notifications",
                         "--loglevel=WARNING", "--without-mingle", "--without-gossip"], env=env),
        Child("beat", [*celery, "beat", "--loglevel=WARNING",
                       f"--pidfile={Path(settings.DATA_DIR) / 'celerybeat.pid'}"], env=env),
        Child("session-proxy", [sys.executable, "-m", "portal.session_proxy", "--listen", proxy_listen(),
                                "--portal", f"http://{_local(addrport)}"], env=env),
    ]


def proxy_listen() -> str:
    """host:port of SESSION_URL, where the session proxy serves."""
    parts = urlsplit(settings.SESSION_URL)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 80}"


def _local(addrport: str) -> str:
    """The portal's address as the proxy reaches it: runserver's [address:]port, a wildcard address as
    loopback."""
    host, _, port = addrport.rpartition(":")
    return f"{'127.0.0.1' if host in ('', '0.0.0.0', '[::]') else host}:{port}"  # noqa: S104 - a wildcard is read, not bound
