"""Run the whole portal on embedded defaults: SQLite, filesystem broker, the demo lab on two simulated clusters; the worker,
beat, session proxy and the background workload (lab/demo_workload.py) are supervised children
(portal/supervisor.py)."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Sum

from lab.demo import USERS, seed
from lab.demo_workload import DEFAULT_MAX_QUEUED, DEFAULT_RATE_PER_MIN
from portal.models import Department
from portal.supervisor import Child, Supervisor
from quotas.models import FlavorKind
from scheduling.models import Node
from scheduling.services.sessions import route_url


class Command(BaseCommand):
    help = ("Migrate, seed demo data, start a supervised Celery worker and beat, the session proxy and a gentle "
            "background workload, and serve the portal on ADDRPORT "
            "(default 127.0.0.1:8000; e.g. `manage.py demo 0.0.0.0:8080` to serve other machines, which then "
            "also need ALLOWED_HOSTS). The demo takes a second port: the session proxy, which serves notebooks "
            "and inference endpoints on 127.0.0.1:SESSION_PORT (default 8001; --session-port). A second demo "
            "on one host needs its own ADDRPORT, --session-port and DATA_DIR.")

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000", metavar="ADDRPORT",
                            help="Address and port to serve on, as [address:]port (default 127.0.0.1:8000), "
                                 "exactly as runserver takes it.")
        parser.add_argument("--session-port", type=int, default=None, metavar="PORT",
                            help="The session proxy's port on 127.0.0.1, the second port the demo takes: sessions "
                                 "and endpoints are served at http://s<job id>.SESSION_DOMAIN:PORT/ (default: "
                                 f"SESSION_PORT, {settings.SESSION_PORT or 'empty'}).")
        parser.add_argument("--no-worker", action="store_true",
                            help="Do not start the Celery worker/beat or the session proxy.")
        parser.add_argument("--seed-only", action="store_true", help="Seed and exit.")
        parser.add_argument("--no-workload", action="store_true",
                            help="Do not run the background submitter that keeps the demo busy once its seeded "
                                 "jobs are done (lab/demo_workload.py).")
        parser.add_argument("--workload-rate", type=float, default=DEFAULT_RATE_PER_MIN, metavar="JOBS_PER_MIN",
                            help=f"The background submitter's jobs a minute, on average (default "
                                 f"{DEFAULT_RATE_PER_MIN:g}).")
        parser.add_argument("--workload-max-queued", type=int, default=DEFAULT_MAX_QUEUED, metavar="N",
                            help="It submits nothing while this many jobs wait, queued or awaiting approval "
                                 f"(default {DEFAULT_MAX_QUEUED}).")

    def handle(self, *args, addrport, no_worker, seed_only, no_workload, workload_rate, workload_max_queued,
               session_port=None, **opts):
        if workload_rate <= 0 or workload_max_queued < 1:
            raise CommandError("--workload-rate must be positive and --workload-max-queued at least 1.")
        if session_port is not None:
            if not 1 <= session_port <= 65535:
                raise CommandError(f"--session-port must be a port number (1-65535), got {session_port}.")
            use_session_port(session_port)
        if not (seed_only or no_worker):
            proxy_port_free()
        call_command("migrate", interactive=False, verbosity=0)
        creds = seed()
        self.stdout.write(self.style.SUCCESS(f"Demo data ready: {describe_lab()}."))
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
                workload = None if no_workload else (workload_rate, workload_max_queued)
                supervisor = Supervisor(background_processes(addrport, workload=workload),
                                        status_path=Path(settings.DATA_DIR) / STATUS_FILE)
                supervisor.start()
            self.stdout.write(self.style.SUCCESS(banner(addrport, proxy=not no_worker)))
            call_command("runserver", addrport, use_reloader=False)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
            if supervisor is not None:
                supervisor.stop()

STATUS_FILE = "demo-processes.json"


def banner(addrport: str, *, proxy: bool = True) -> str:
    """Where the demo serves: the portal, its API docs, and the second port, the session proxy's."""
    sessions = route_url(0).replace("s0.", "s<job id>.").replace("/s/0/", "/s/<job id>/")
    text = f"\nOpen http://{addrport}/ (API docs at http://{addrport}/api/docs/).\n"
    if proxy:
        text += (f"The session proxy listens on {proxy_listen()}: notebooks and endpoints at {sessions}, each on its "
                 "own host (--session-port chooses another port).\n")
    else:
        text += "No session proxy (--no-worker): notebooks and endpoints cannot be opened.\n"
    return text


def use_session_port(port: int) -> None:
    """Serve sessions on ``port``: the routes this process writes and the proxy and workers it starts agree."""
    settings.SESSION_PORT = str(port)
    os.environ["SESSION_PORT"] = str(port)


def proxy_port_free() -> None:
    """Refuse to start when the session proxy's port is taken (another demo, most often): the proxy would fail
    and be started again forever, and the sessions' links would lead to the other demo's proxy."""
    listen = proxy_listen()
    host, _, port = listen.rpartition(":")
    with socket.socket() as s:
        try:
            s.bind((host, int(port)))
        except OSError as exc:
            raise CommandError(f"The session proxy's port {listen} is taken ({exc.strerror}), perhaps by another "
                               "demo: choose another with --session-port.") from None


def describe_lab() -> str:
    """The seeded lab in a line, from the database (its departments and each cluster's nodes), so the banner
    says what is there, whatever the lab file declares."""
    departments = list(Department.objects.filter(archived_at__isnull=True).order_by("pk")
                       .values_list("slug", flat=True))
    clusters: dict[str, list[str]] = {}
    for cluster, flavor, kind, gpus, nodes in (
            Node.objects.values("cluster__name", "flavor__name", "flavor__kind")
            .annotate(gpus=Sum("gpus"), nodes=Count("pk")).order_by("cluster__name", "flavor__name")
            .values_list("cluster__name", "flavor__name", "flavor__kind", "gpus", "nodes")):
        clusters.setdefault(cluster, []).append(f"{nodes} CPU node{'s' if nodes != 1 else ''}"
                                                if kind == FlavorKind.CPU else f"{gpus} x {flavor}")
    where = "; ".join(f"{name}: {', '.join(parts)}" for name, parts in clusters.items())
    n = len(clusters)
    return (f"{len(departments)} departments ({', '.join(departments)}), {n} simulated cluster{'s' if n != 1 else ''}"
            f" ({where})")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def background_processes(addrport: str = "127.0.0.1:8000",
                         workload: tuple[float, int] | None = (DEFAULT_RATE_PER_MIN, DEFAULT_MAX_QUEUED)
                         ) -> list[Child]:
    """The worker and beat as two processes, so either is started again alone and beat never outlives a
    worker it was embedded in. Beat holds a pid file: a second demo on the same DATA_DIR cannot run a second
    beat (it exits, is logged, and is tried again after its back-off). The session proxy carries sessions'
    HTTP and WebSocket traffic on SESSION_PORT for every host under SESSION_DOMAIN (docs/sessions.md), asking the portal at ``addrport``.
    ``workload`` (jobs a minute, most jobs waiting), unless None, adds the background submitter
    (lab/demo_workload.py), so the demo keeps moving after its seeded jobs end."""
    celery = [sys.executable, "-m", "celery", "-A", "portal"]
    # charts fill in within minutes in a demo (production samples every 5 minutes)
    env = {**os.environ, "STATS_INTERVAL_S": os.environ.get("STATS_INTERVAL_S", "30")}
    return [
        Child("worker", [*celery, "worker", "--pool=threads", "--concurrency=4", "-Q", "starts,default,cycle,pods,notifications",
                         "--loglevel=WARNING", "--without-mingle", "--without-gossip"], env=env),
        Child("beat", [*celery, "beat", "--loglevel=WARNING",
                       f"--pidfile={Path(settings.DATA_DIR) / 'celerybeat.pid'}"], env=env),
        Child("session-proxy", [sys.executable, "-m", "portal.session_proxy", "--listen", proxy_listen(),
                                "--portal", f"http://{_local(addrport)}", "--domain", settings.SESSION_DOMAIN],
              env=env),
        *([] if workload is None else [Child("workload", [
            sys.executable, "-m", "django", "demo_workload", f"--rate={workload[0]:g}",
            f"--max-queued={workload[1]}"], env={**env, "DJANGO_SETTINGS_MODULE": _settings_module()})]),
    ]


def _settings_module() -> str:
    return os.environ.get("DJANGO_SETTINGS_MODULE") or "portal.settings"


def proxy_listen() -> str:
    """Where the session proxy serves: loopback, SESSION_PORT (browsers resolve *.localhost there; the demo's
    own clients send the session's host in the Host header)."""
    return f"127.0.0.1:{settings.SESSION_PORT or 80}"


def _local(addrport: str) -> str:
    """The portal's address as the proxy reaches it: runserver's [address:]port, a wildcard address as
    loopback."""
    host, _, port = addrport.rpartition(":")
    return f"{'127.0.0.1' if host in ('', '0.0.0.0', '[::]') else host}:{port}"  # noqa: S104 - a wildcard is read, not bound
