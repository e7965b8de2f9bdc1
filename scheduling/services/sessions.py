"""Sessions and services: connecting through the portal, the forward-auth decision every request of a route
gets, the lifetime warning, and the stop of an idle session (docs/sessions.md).

Each route is an origin of its own, ``s<id>.<SESSION_DOMAIN>`` (``portal.session_hosts``). Connecting: the
Connect of someone who may reach it (a POST, signed in) makes a grant with a one-time code good for
``CODE_TTL``; the browser is sent to the route's host with it, and the route's ``/_portal/connect`` exchanges it
for a token in an HttpOnly cookie of that host alone. The code may land in an access log, but it is spent on
first use and dead within a minute; the token never appears in a URL. A service's programmatic callers use a
service key instead: a bearer token good for that one service, so an app that logs its headers leaks nothing
wider than itself.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from notifications.services.outbox import emit
from portal import session_hosts
from portal.errors import Conflict
from portal.tenancy import VIEW, membership_of
from scheduling.backends import get_backend
from scheduling.models import CONNECT, Job, JobKind, JobState, SessionGrant
from scheduling.models.sessions import digest
from scheduling.services.cluster_binding import cluster_of
from scheduling.services.jobs import job_stop, record_event

CODE_TTL = timedelta(seconds=60)
TOKEN_TTL = timedelta(hours=12)
SEEN_EVERY = timedelta(seconds=30)  # last_seen_at is written at most this often per grant
CONNECTED_WINDOW = timedelta(minutes=2)  # a grant seen this recently: a client is connected
SERVICE_KEY_PREFIX = "gps_"
ROUTE_STATES = (JobState.RUNNING,)


def route_path(job_id: int) -> str:
    return f"/s/{job_id}/"


def route_host(job_id: int) -> str:
    return session_hosts.route_host(job_id, settings.SESSION_DOMAIN)


def route_origin(job_id: int) -> str:
    """``scheme://s<id>.<SESSION_DOMAIN>[:port]``: https behind TLS (SECURE_SSL)."""
    scheme = "https" if settings.SESSION_COOKIE_SECURE else "http"
    port = f":{settings.SESSION_PORT}" if settings.SESSION_PORT else ""
    return f"{scheme}://{route_host(job_id)}{port}"


def route_url(job_id: int) -> str:
    return f"{route_origin(job_id)}{route_path(job_id)}"


def sessions_origin_pattern() -> str:
    """Every route's origin, as a CSP source (``http://*.sessions.localhost:8001``)."""
    return route_origin(0).replace("://s0.", "://*.", 1)


def cookie_name() -> str:
    return session_hosts.route_cookie_name(settings.SESSION_COOKIE_SECURE)


def may_reach(user, job: Job) -> bool:
    """Who may go through a route: a session's owner alone; a service's, every member of the job's department
    (platform admins of another department included nowhere: docs/sessions.md)."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active or not job.has_route:
        return False
    if job.kind == JobKind.SESSION:
        return job.owner_id == user.pk and Job.objects.permits(user, job, CONNECT)
    m = membership_of(user)
    return m is not None and m.department_id == job.department_id


def reachable(user, job_id) -> Job | None:
    """The job of ``job_id`` if ``user`` may go through its route, else None (one answer, a 404, for all)."""
    if not str(job_id).isascii() or not str(job_id).isdigit():
        return None
    job = Job.objects.restrict(user, VIEW).filter(pk=job_id).first()
    return job if job is not None and may_reach(user, job) else None


def connect_start(*, user, job: Job, now: datetime | None = None) -> str:
    """A one-time connect URL for someone who may reach a running session or service (the caller looked the job
    up with ``reachable``: anyone else's is a 404 before this). Refused (409) while it does not run."""
    if not job.has_route:
        raise Conflict("Only sessions and services have a route to connect to.")
    if job.state not in ROUTE_STATES:
        raise Conflict(f"The {job.get_kind_display().lower()} is {job.get_state_display().lower()}: connect once "
                       "it runs.")
    now = now or timezone.now()
    code = secrets.token_urlsafe(32)
    SessionGrant.objects.create(job=job, user=user, code_hash=digest(code), code_expires_at=now + CODE_TTL,
                                expires_at=now + TOKEN_TTL, created_at=now)
    return f"{route_url(job.pk)}_portal/connect?code={code}"


def connect_exchange(*, job_id: int, code: str, now: datetime | None = None) -> str | None:
    """Spend a connect code: the token for the route's cookie, or None (unknown, spent, expired, another
    session's, or a user who may no longer connect)."""
    now = now or timezone.now()
    token = secrets.token_urlsafe(32)
    updated = SessionGrant.objects.filter(
        job_id=job_id, code_hash=digest(code or ""), exchanged_at__isnull=True, code_expires_at__gt=now,
    ).update(exchanged_at=now, token_hash=digest(token), last_seen_at=now)
    return token if updated else None


def service_key_issue(*, user, job: Job, now: datetime | None = None) -> tuple[str, datetime]:
    """A key for callers of a running service, good at its route alone until the service's horizon (or until
    the issuing member may no longer reach it): ``(key, expires_at)``. Only its SHA-256 is stored."""
    if job.kind != JobKind.SERVICE:
        raise Conflict("Service keys are for services; open a session with Connect.")
    if job.state not in ROUTE_STATES:
        raise Conflict(f"The service is {job.get_state_display().lower()}: ask for a key once it runs.")
    now = now or timezone.now()
    key = SERVICE_KEY_PREFIX + secrets.token_urlsafe(32)
    expires_at = (job.started_at or now) + timedelta(seconds=job.max_runtime_s)
    # a grant born exchanged: its one-time code is never handed out and already expired
    SessionGrant.objects.create(job=job, user=user, code_hash=digest(secrets.token_urlsafe(32)),
                                code_expires_at=now, token_hash=digest(key), exchanged_at=now,
                                expires_at=expires_at, created_at=now)
    return key, expires_at


@dataclass(frozen=True)
class Decision:
    """``status``: 200 (through), 401 (the request carries no credential at all) or 404 (none of its
    credentials reaches this running session or service: unknown, expired, another's, a colleague's session, or
    the job not running; one answer, which says nothing of the job). ``user`` and ``job``: who goes through,
    and to what, on 200 (where the pod answers is the backend's: ``upstream_of``)."""

    status: int
    user: object = None
    job: Job | None = None


def authorize(*, job_id: int, tokens: list[str] = (), key: str | None = None, origin: str | None = None,
              now: datetime | None = None) -> Decision:
    """The forward-auth decision for one request to the route of job ``job_id``: a route token from the
    connect cookie (every value the request carries is tried: a stale or planted one beside a good one refuses
    nothing), or a service key (``Authorization: Bearer gps_...``). The portal's own log-in and API tokens are
    not credentials here: they never reach a route's host. A request that a browser made from another origin
    (its ``Origin`` header, as every cross-origin fetch and every WebSocket has) gets nothing from the cookie.
    Sessions admit their owner alone; services every member of the job's department."""
    now = now or timezone.now()
    hashes = [digest(t) for t in tokens if t][:8]
    if origin and origin.rstrip("/") != route_origin(job_id):
        hashes = []
    if key and key.startswith(SERVICE_KEY_PREFIX):
        hashes.append(digest(key))
    if not hashes:
        return Decision(401)
    grants = list(SessionGrant.objects.select_related("user", "job", "job__cluster").filter(
        job_id=job_id, token_hash__in=hashes, expires_at__gt=now).exclude(token_hash="").order_by("pk"))
    for grant in grants:
        if not may_reach(grant.user, grant.job) or grant.job.state not in ROUTE_STATES:
            continue
        if grant.last_seen_at is None or now - grant.last_seen_at > SEEN_EVERY:
            SessionGrant.objects.filter(pk=grant.pk).update(last_seen_at=now)
        return Decision(200, user=grant.user, job=grant.job)
    return Decision(404)


def note_readiness(job: Job, pods) -> None:
    """Record whether the session's or service's pod is ready (its readiness probe passes, as the pod's Ready
    condition says), once per change, on the job and its timeline."""
    ready = bool(pods) and all(p.ready and p.phase == "Running" for p in pods)
    if ready == job.ready:
        return
    if Job.objects.filter(pk=job.pk, attempt=job.attempt, ready=job.ready).update(ready=ready):
        job.ready = ready
        record_event(job=job, kind="pod", attempt=job.attempt, reason_code="ready" if ready else "not_ready",
                     message=f"{job.get_kind_display().lower()} {'ready' if ready else 'not ready'}: "
                             f"{job.readiness_path} {'answers' if ready else 'does not answer yet'}")


def upstream_of(job: Job) -> str:
    """Where the job's running pod answers, as its cluster's backend says (the simulated cluster: host:port
    on loopback, for the demo's session proxy); "" on a real cluster, where the ingress routes to the job's
    Service itself."""
    return get_backend(cluster_of(job)).route_upstream(job_id=job.pk, attempt=job.attempt)


def client_seen_at(job: Job) -> datetime | None:
    """The last time a client came through the job's route (any of its grants)."""
    return SessionGrant.objects.filter(job=job).aggregate(m=Max("last_seen_at"))["m"]


def ends_at(job: Job) -> datetime | None:
    """When a running session's lifetime ends (services run until stopped)."""
    if job.kind != JobKind.SESSION or job.started_at is None:
        return None
    return job.started_at + timedelta(seconds=job.max_runtime_s)


def ending_soon(job: Job, now: datetime | None = None) -> bool:
    end = ends_at(job)
    now = now or timezone.now()
    return (end is not None and job.state == JobState.RUNNING
            and end - now <= timedelta(minutes=settings.SESSION_END_WARNING_MINUTES))


def warn_ending(*, now: datetime | None = None) -> int:
    """Tell the owner of every running session whose lifetime ends within SESSION_END_WARNING_MINUTES, once
    (timeline event and notification; the page shows a banner from the same times). Returns how many."""
    now = now or timezone.now()
    warned = 0
    for job in Job.objects.filter(kind=JobKind.SESSION, state=JobState.RUNNING, end_warned_at__isnull=True,
                                  started_at__isnull=False).order_by("pk"):
        end = ends_at(job)
        if end is None or end - now > timedelta(minutes=settings.SESSION_END_WARNING_MINUTES):
            continue
        if not Job.objects.filter(pk=job.pk, end_warned_at__isnull=True).update(end_warned_at=now):
            continue
        minutes = max(0, round((end - now).total_seconds() / 60))
        record_event(job=job, kind="note", reason_code="session_ending",
                     message=f"the session ends in {minutes} minutes ({end:%H:%M} UTC): save your work",
                     data={"ends_at": end.isoformat()})
        emit(kind="session.ending", department_id=job.department_id, users=[job.owner_id],
             data={"job_id": job.pk, "job_name": job.name, "minutes": str(minutes)},
             dedupe_key=f"session.ending:{job.pk}:{job.attempt}")
        warned += 1
    return warned


def stop_if_idle(*, job: Job, gpu_idle_minutes: float, now: datetime) -> bool:
    """The idle-session policy: a running session whose GPUs stayed idle (``gpu_idle_minutes``, the idle
    detection's streak) and that no client reached for SESSION_IDLE_MINUTES is stopped, and its owner told."""
    limit = settings.SESSION_IDLE_MINUTES
    if not limit or job.kind != JobKind.SESSION or job.state != JobState.RUNNING or gpu_idle_minutes < limit:
        return False
    seen = client_seen_at(job) or job.started_at
    if seen is not None and now - seen < timedelta(minutes=limit):
        return False
    comment = (f"stopped by the idle-session policy: GPUs idle and no client connected for {limit:g} minutes")
    job_stop(job=job, comment=comment)
    emit(kind="session.stopped_idle", department_id=job.department_id, users=[job.owner_id],
         data={"job_id": job.pk, "job_name": job.name, "minutes": f"{limit:g}"},
         dedupe_key=f"session.stopped_idle:{job.pk}:{job.attempt}")
    return True


def connected(job: Job, now: datetime | None = None) -> bool:
    seen = client_seen_at(job)
    return seen is not None and (now or timezone.now()) - seen < CONNECTED_WINDOW


def route_context(user, job: Job) -> dict:
    """What the job's page shows of its route: URL, end, connected client, whether this user may connect."""
    return {"url": route_url(job.pk), "ends_at": ends_at(job), "ending_soon": ending_soon(job),
            "connected": connected(job), "can_connect": may_reach(user, job)}
