"""Bookings and maintenance windows (the calendar): created, edited and cancelled here, each change audited in
its transaction; what the engine reads of them (``engine_calendar``); the notices they cause (``notify_due``).

Who: platform admins book for any department and declare maintenance windows; a department admin books for
their own department (or one of its teams), within its nominal quota of the flavor (its bookings at any instant
add up to at most that); a team admin books for their own team, within the team's nominal quota of the flavor
(its split of the department's, every cluster together) the same way. A booking must fit the installed capacity at every instant of its window, with the other bookings and
the maintenance windows that overlap it; a maintenance window must leave room for the bookings it overlaps.
A conflict is a ``ValidationFailed`` naming the windows in the way and how many GPUs are left.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

import engine as core
from engine.teams import account
from notifications.models import Event
from notifications.services import emit
from portal.audit import audit
from portal.errors import Forbidden, ValidationFailed
from portal.models import Membership
from portal.tenancy import membership_of
from quotas.models import Quota, TeamQuota
from scheduling.models import ACTIVE_STATES, Booking, Cluster, Job, MaintenanceWindow, Node

# How far ahead the owners of running jobs a maintenance window affects are told (and again at its start).
NOTICE_AHEAD = timedelta(hours=24)
MAX_WINDOW = timedelta(days=92)


def _fail(field: str, message: str, code: str = "invalid"):
    raise ValidationFailed(message, fields={field: [{"code": code, "message": message}]})


def _platform(actor) -> bool:
    """A platform admin, or no actor: the platform itself (the lab file applied without ``--actor``; the
    API always passes the signed-in user)."""
    if actor is None:
        return True
    m = membership_of(actor)
    return m is not None and m.is_platform_admin


def _when(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%a %d %b %H:%M UTC")


# ---------------------------------------------------------------- what covers what


def covered_nodes(window: MaintenanceWindow, nodes: list[Node] | None = None) -> list[Node]:
    """The Node rows (of every flavor) the window takes out of service."""
    if nodes is None:
        nodes = list(Node.objects.filter(cluster_id=window.cluster_id).select_related("flavor"))
    names = set(window.nodes or [])
    selector = dict(window.selector or {})
    out = []
    for n in nodes:
        if n.cluster_id != window.cluster_id:
            continue
        labels = n.labels or {}
        if (not names and not selector) or n.name in names or (
                selector and all(labels.get(k) == v for k, v in selector.items())):
            out.append(n)
    return out


def installed(cluster: Cluster, flavor) -> int:
    """The GPUs of ``flavor`` on ``cluster`` that the portal may use (what others' pods hold left out)."""
    return sum(max(0, n.gpus - n.used_by_others)
               for n in Node.objects.filter(cluster=cluster, flavor=flavor, schedulable=True))


def _peak(intervals: list[tuple[datetime, datetime, int]], start: datetime, end: datetime) -> tuple[int, datetime]:
    """The most GPUs the intervals hold at once within [start, end), and the first instant they do."""
    points = []
    for s, e, g in intervals:
        s, e = max(s, start), min(e, end)
        if s < e:
            points += [(s, 1, g), (e, 0, -g)]  # at the same instant an end comes before a start
    points.sort(key=lambda p: (p[0], p[1]))
    level, best, when = 0, 0, start
    for t, _, g in points:
        level += g
        if level > best:
            best, when = level, t
    return best, when


def _held_by_others(*, cluster, flavor, start, end, booking_id=None, maintenance=None) -> list[tuple]:
    """(start, end, GPUs, label) of the live bookings and maintenance windows of the pool overlapping
    [start, end), apart from the booking being edited; ``maintenance``: a window not saved yet to count too."""
    rows = []
    for b in Booking.objects.overlapping(start, end).filter(cluster=cluster, flavor=flavor).exclude(pk=booking_id):
        rows.append((b.start, b.end, b.gpus, b))
    windows = list(MaintenanceWindow.objects.overlapping(start, end).filter(cluster=cluster))
    if maintenance is not None:
        windows = [w for w in windows if w.pk != maintenance.pk] + [maintenance]
    nodes = list(Node.objects.filter(cluster=cluster, flavor=flavor, schedulable=True))
    for w in windows:
        gpus = sum(max(0, n.gpus - n.used_by_others) for n in covered_nodes(w, nodes))
        if gpus:
            rows.append((w.start, w.end, gpus, w))
    return rows


def _label(row, viewer_department_id: int | None) -> str:
    if isinstance(row, Booking):
        if viewer_department_id is None or row.department_id == viewer_department_id:
            return f"booking {row.pk} ({row.purpose}, {row.gpus} GPUs, {_when(row.start)} to {_when(row.end)})"
        return f"booking {row.pk} of another department ({row.gpus} GPUs, {_when(row.start)} to {_when(row.end)})"
    return f"maintenance window {row.pk} ({row.reason}, {_when(row.start)} to {_when(row.end)})"


# ---------------------------------------------------------------- bookings


def _team_admin_of(m, team) -> bool:
    """Whether membership ``m`` is a team admin of ``team`` (and no more than that: department admins book as
    such)."""
    return (team is not None and m is not None and m.team_admin and m.team_id == team.pk
            and not m.is_department_admin)


def may_change(user, booking: Booking) -> bool:
    """Whether ``user`` may edit or cancel ``booking``: its department's admins and platform admins (the
    tenancy rule), and for a team's booking the team's admins."""
    if Booking.objects.permits(user, booking, "change"):
        return True
    return booking.team_id is not None and _team_admin_of(membership_of(user), booking.team)


def _booking_rules(*, actor, department, cluster, flavor, gpus, start, end, team=None, booking_id=None,
                   now=None) -> None:
    """Raise unless ``actor`` may book this and it fits the capacity (see the module's rules)."""
    m = membership_of(actor)
    platform = _platform(actor)
    team_admin = not platform and _team_admin_of(m, team)
    if not platform and not team_admin and (
            m is None or not (m.is_department_admin and m.department_id == department.pk)):
        raise Forbidden("Only platform admins, department admins for their own department and team admins for "
                        "their own team book GPUs.")
    if team is not None and team.department_id != department.pk:
        _fail("team", f"{department.slug} has no team {team.slug}.", "does_not_exist")
    now = now or timezone.now()
    if flavor.is_cpu:
        _fail("flavor", f"{flavor.name} is a CPU pool: bookings hold GPUs.")
    if end <= start:
        _fail("end", "The booking must end after it starts.")
    if end <= now:
        _fail("end", "The booking would be over already.")
    if end - start > MAX_WINDOW:
        _fail("end", f"A booking lasts at most {MAX_WINDOW.days} days.")
    if gpus < 1:
        _fail("gpus", "Book at least one GPU.")
    total = installed(cluster, flavor)
    if total == 0:
        _fail("flavor", f"{cluster.name} has no {flavor.name} GPUs.")
    viewer = None if platform else m.department_id
    if team_admin:
        nominal = _team_nominal(team, flavor)
        own = [(b.start, b.end, b.gpus) for b in Booking.objects.overlapping(start, end)
               .filter(team=team, flavor=flavor).exclude(pk=booking_id)]
        peak, when = _peak(own + [(start, end, gpus)], start, end)
        if peak > nominal:
            left = max(0, nominal - (peak - gpus))
            _fail("gpus", f"A team admin books within the team's nominal quota: {nominal} {flavor.name} GPUs, of "
                          f"which {left} are not booked yet at {_when(when)}.", "over_quota")
    elif not platform:
        nominal = _nominal(department, flavor, cluster)
        own = [(b.start, b.end, b.gpus) for b in Booking.objects.overlapping(start, end)
               .filter(department=department, flavor=flavor).exclude(pk=booking_id)]
        peak, when = _peak(own + [(start, end, gpus)], start, end)
        if peak > nominal:
            left = max(0, nominal - (peak - gpus))
            _fail("gpus", f"A department admin books within the department's nominal quota: {nominal} "
                          f"{flavor.name} GPUs, of which {left} are not booked yet at {_when(when)}.", "over_quota")
    others = _held_by_others(cluster=cluster, flavor=flavor, start=start, end=end, booking_id=booking_id)
    peak, when = _peak([(s, e, g) for s, e, g, _ in others] + [(start, end, gpus)], start, end)
    if peak > total:
        in_way = [row for s, e, _, row in others if s <= when < e]
        left = max(0, total - (peak - gpus))
        names = "; ".join(_label(row, viewer) for row in in_way)
        # Nothing in the way: the booking alone asks for more than the pool has.
        held = f": {names} hold the rest." if names else f", fewer than the {gpus} asked for."
        _fail("gpus", f"Only {left} of the {total} {flavor.name} GPUs on {cluster.name} are free to book at "
                      f"{_when(when)}{held}", "conflict")


def _nominal(department, flavor, cluster) -> int:
    rows = Quota.objects.filter(department=department, flavor=flavor, resource="gpus")
    scoped = [q.nominal for q in rows if q.cluster_id == cluster.pk]
    if scoped:
        return scoped[0]
    return next((q.nominal for q in rows if q.cluster_id is None), 0)


def _team_nominal(team, flavor) -> int:
    row = TeamQuota.objects.filter(team=team, flavor=flavor).first()
    return row.nominal if row is not None else 0


def _owners(department, usernames) -> list:
    users = list(get_user_model().objects.filter(username__in=usernames, membership__department=department))
    missing = sorted(set(usernames) - {u.username for u in users})
    if missing:
        _fail("users", f"Not members of {department.slug}: {', '.join(missing)}.")
    return users


def _snapshot(b: Booking) -> dict:
    return {"department": b.department.slug, "team": b.team.slug if b.team_id else None, "cluster": b.cluster.name, "flavor": b.flavor.name, "gpus": b.gpus,
            "start": b.start.isoformat(), "end": b.end.isoformat(), "purpose": b.purpose,
            "users": sorted(u.username for u in b.users.all())}


@transaction.atomic
def booking_create(*, actor, department, cluster, flavor, gpus: int, start, end, purpose: str,
                   users=(), team=None, now=None) -> Booking:
    """A booking for ``department``: all its members, the members of ``team`` (one of its teams), or ``users``."""
    if team is not None and users:
        _fail("users", "A booking is for a team or for some members, not both.")
    _booking_rules(actor=actor, department=department, cluster=cluster, flavor=flavor, gpus=gpus, start=start,
                   end=end, team=team, now=now)
    owners = _owners(department, users) if users else []
    booking = Booking.objects.create(department=department, team=team, cluster=cluster, flavor=flavor, gpus=gpus,
                                     start=start,
                                     end=end, purpose=purpose, created_by=actor if actor is not None and actor.pk else None)
    booking.users.set(owners)
    audit(actor=actor, action="booking.create", obj=booking, department=department, new=_snapshot(booking))
    return booking


@transaction.atomic
def booking_update(*, booking: Booking, actor, comment: str = "", now=None, **changes) -> Booking:
    """Change a live booking's GPUs, window, purpose or owners (its ``users``, or its ``team``: the lab file's);
    the rules are checked again as for a new one."""
    booking = Booking.objects.select_for_update().get(pk=booking.pk)
    if booking.cancelled_at is not None:
        _fail("booking", "The booking was cancelled.", "cancelled")
    old = _snapshot(booking)
    users = changes.pop("users", None)
    team = changes.get("team", booking.team)
    if team is not None and (users if users is not None else booking.users.exists()):
        _fail("users", "A booking is for a team or for some members, not both.")
    for name, value in changes.items():
        setattr(booking, name, value)
    _booking_rules(actor=actor, department=booking.department, cluster=booking.cluster, flavor=booking.flavor,
                   gpus=booking.gpus, start=booking.start, end=booking.end, team=booking.team,
                   booking_id=booking.pk, now=now)
    booking.save()
    if users is not None:
        booking.users.set(_owners(booking.department, users))
    audit(actor=actor, action="booking.update", obj=booking, department=booking.department, old=old,
          new=_snapshot(booking), comment=comment)
    return booking


@transaction.atomic
def booking_cancel(*, booking: Booking, actor, comment: str = "", now=None) -> Booking:
    booking = Booking.objects.select_for_update().get(pk=booking.pk)
    if booking.cancelled_at is None:
        booking.cancelled_at = now or timezone.now()
        booking.save(update_fields=["cancelled_at"])
        audit(actor=actor, action="booking.cancel", obj=booking, department=booking.department,
              old=_snapshot(booking), comment=comment)
    return booking


# ---------------------------------------------------------------- maintenance windows


def _maintenance_rules(*, actor, window: MaintenanceWindow, now=None) -> None:
    if not _platform(actor):
        raise Forbidden("Only platform admins declare maintenance windows.")
    now = now or timezone.now()
    if window.end <= window.start:
        _fail("end", "The window must end after it starts.")
    if window.end <= now:
        _fail("end", "The window would be over already.")
    if window.end - window.start > MAX_WINDOW:
        _fail("end", f"A maintenance window lasts at most {MAX_WINDOW.days} days.")
    nodes = list(Node.objects.filter(cluster=window.cluster).select_related("flavor"))
    names = {n.name for n in nodes}
    unknown = sorted(set(window.nodes or []) - names)
    if unknown:
        _fail("nodes", f"No such node on {window.cluster.name}: {', '.join(unknown)}.")
    covered = covered_nodes(window, nodes)
    if not covered:
        _fail("selector", f"No node of {window.cluster.name} carries every label of the selector.")
    for flavor in {n.flavor for n in covered if not n.flavor.is_cpu}:
        total = installed(window.cluster, flavor)
        rows = _held_by_others(cluster=window.cluster, flavor=flavor, start=window.start, end=window.end,
                               maintenance=window)
        peak, when = _peak([(s, e, g) for s, e, g, _ in rows], window.start, window.end)
        if peak > total:
            in_way = [row for s, e, _, row in rows if s <= when < e and isinstance(row, Booking)]
            _fail("start", f"The window leaves {flavor.name} on {window.cluster.name} too few GPUs for the bookings "
                           f"at {_when(when)} ({peak - total} short): {'; '.join(_label(r, None) for r in in_way)}. "
                           "Move or shrink those bookings first.", "conflict")


def _window_snapshot(w: MaintenanceWindow) -> dict:
    return {"cluster": w.cluster.name, "nodes": list(w.nodes or []), "selector": dict(w.selector or {}),
            "start": w.start.isoformat(), "end": w.end.isoformat(), "reason": w.reason}


@transaction.atomic
def maintenance_create(*, actor, cluster, start, end, reason: str, nodes=(), selector=None,
                       now=None) -> MaintenanceWindow:
    window = MaintenanceWindow(cluster=cluster, start=start, end=end, reason=reason, nodes=sorted(set(nodes)),
                               selector=dict(selector or {}), created_by=actor if actor is not None and actor.pk else None)
    _maintenance_rules(actor=actor, window=window, now=now)
    window.save()
    audit(actor=actor, action="maintenance.create", obj=window, new=_window_snapshot(window))
    return window


@transaction.atomic
def maintenance_update(*, window: MaintenanceWindow, actor, comment: str = "", now=None,
                       **changes) -> MaintenanceWindow:
    window = MaintenanceWindow.objects.select_for_update().get(pk=window.pk)
    if window.cancelled_at is not None:
        _fail("maintenance", "The window was cancelled.", "cancelled")
    old = _window_snapshot(window)
    for name, value in changes.items():
        setattr(window, name, sorted(set(value)) if name == "nodes" else value)
    _maintenance_rules(actor=actor, window=window, now=now)
    window.save()
    audit(actor=actor, action="maintenance.update", obj=window, old=old, new=_window_snapshot(window), comment=comment)
    return window


@transaction.atomic
def maintenance_cancel(*, window: MaintenanceWindow, actor, comment: str = "", now=None) -> MaintenanceWindow:
    if not _platform(actor):
        raise Forbidden("Only platform admins declare maintenance windows.")
    window = MaintenanceWindow.objects.select_for_update().get(pk=window.pk)
    if window.cancelled_at is None:
        window.cancelled_at = now or timezone.now()
        window.save(update_fields=["cancelled_at"])
        audit(actor=actor, action="maintenance.cancel", obj=window, old=_window_snapshot(window), comment=comment)
    return window


# ---------------------------------------------------------------- the engine's view


def engine_calendar(now: datetime) -> tuple[tuple[core.Booking, ...], tuple[core.MaintenanceWindow, ...]]:
    """The live bookings and maintenance windows not over yet, as the engine's types (two queries and the
    owners'). A booking names its team (by account) when it has one, its users when it has some, else its
    department."""
    bookings = []
    for b in (Booking.objects.live().filter(end__gt=now).select_related("department", "team", "cluster", "flavor")
              .prefetch_related("users")):
        users = tuple(sorted(u.username for u in b.users.all()))
        teams = (account(b.department.slug, b.team.slug),) if b.team_id else ()
        departments = () if users or teams else (b.department.slug,)
        bookings.append(core.Booking(b.pk, b.cluster.name, b.flavor.name, b.gpus, b.start.timestamp(),
                                     b.end.timestamp(), b.purpose, departments, users, teams))
    windows = tuple(
        core.MaintenanceWindow(w.pk, w.cluster.name, w.start.timestamp(), w.end.timestamp(), tuple(w.nodes or ()),
                               tuple(sorted((str(k), str(v)) for k, v in (w.selector or {}).items())), w.reason)
        for w in MaintenanceWindow.objects.live().filter(end__gt=now).select_related("cluster"))
    return tuple(bookings), windows


# ---------------------------------------------------------------- notices


def affected_jobs(window: MaintenanceWindow) -> list[Job]:
    """The active jobs with a pod on the window's nodes that would still run at its start (by their limit)."""
    names = {n.name for n in covered_nodes(window)}
    out = []
    for job in Job.objects.filter(state__in=ACTIVE_STATES, cluster=window.cluster).select_related("owner"):
        if not names.intersection(job.placement or []):
            continue
        started = job.started_at or job.admitted_at or timezone.now()
        if started + timedelta(seconds=job.max_runtime_s) > window.start:
            out.append(job)
    return out


def notify_due(*, now: datetime | None = None) -> dict[str, int]:
    """Tell the owners of running jobs a maintenance window starting within ``NOTICE_AHEAD`` affects, and a
    booking's owners when it begins (each once: a dedupe key per window and job, per booking)."""
    now = now or timezone.now()
    told = {"maintenance": 0, "booking": 0}
    for w in MaintenanceWindow.objects.live().filter(start__lte=now + NOTICE_AHEAD, end__gt=now).select_related("cluster"):
        jobs = affected_jobs(w)
        keys = {f"maintenance:{w.pk}:job:{job.pk}": job for job in jobs}
        sent = set(Event.objects.filter(dedupe_key__in=keys).values_list("dedupe_key", flat=True))
        for key, job in keys.items():
            if key in sent:
                continue
            emit(kind="maintenance.affects_job", department_id=job.department_id, users=[job.owner_id],
                 data={"job_id": job.pk, "job_name": job.name, "window_id": w.pk, "reason": w.reason,
                       "cluster": w.cluster.name, "start": _when(w.start), "end": _when(w.end)}, dedupe_key=key)
            told["maintenance"] += 1
    for b in (Booking.objects.live().filter(start__lte=now, end__gt=now, started_notified_at__isnull=True)
              .select_related("cluster", "flavor").prefetch_related("users")):
        users = [u.pk for u in b.users.all()]
        if b.team_id is not None:  # a team's booking: its team admins (else, as a department's, its admins)
            users = list(Membership.objects.filter(team_id=b.team_id, team_admin=True).values_list("user_id", flat=True))
        emit(kind="booking.started", department_id=b.department_id, users=users, admins=not users,
             data={"booking_id": b.pk, "purpose": b.purpose, "gpus": b.gpus, "flavor": b.flavor.name,
                   "cluster": b.cluster.name, "end": _when(b.end)},
             dedupe_key=f"booking:{b.pk}:started")
        Booking.objects.filter(pk=b.pk).update(started_notified_at=now)
        told["booking"] += 1
    return told
