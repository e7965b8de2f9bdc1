"""The lab file's calendar: ``bookings:`` and ``maintenance:``, applied like every section (``lab.services.labfile``:
each change through the calendar's services, in its own savepoint, every error with its line), so a booking
that does not fit the capacity, or a window that leaves a booking too few GPUs, is refused as the API refuses it.

A row is known by ``shape.calendar_key`` (a booking by its department, cluster, flavor, start and purpose; a
window by its cluster, start and reason); what else differs is changed in place. Only live rows are matched
and exported, and only those not over yet: the past is history, never changed, exported or pruned."""

from __future__ import annotations

from django.utils import timezone

from lab.services.diffs import field_changes
from lab.services.shape import calendar_key
from portal.errors import ValidationFailed
from portal.models import Department, Team
from quotas.models import Flavor
from scheduling.models import Booking, Cluster, MaintenanceWindow
from scheduling.services import calendar

PRUNED = "pruned by the lab file"


def booking_entry(b: Booking) -> dict:
    """A booking as the file declares it (its team or its users only when it names them)."""
    users = sorted(u.username for u in b.users.all())
    return {"department": b.department.slug, **({"team": b.team.slug} if b.team_id else {}),
            "cluster": b.cluster.name, "flavor": b.flavor.name, "gpus": b.gpus,
            "start": b.start.isoformat(), "end": b.end.isoformat(), "purpose": b.purpose,
            **({"users": users} if users else {})}


def _team(department: Department, slug: str | None) -> Team | None:
    """The team a booking names, or a 400 on ``team`` when its department has none of that name."""
    if slug is None:
        return None
    team = Team.objects.filter(department=department, slug=slug).first()
    if team is None:
        raise ValidationFailed(f"{department.slug} has no team {slug}.", fields={"team": [
            {"code": "does_not_exist", "message": f"{department.slug} has no team {slug}."}]})
    return team


def maintenance_entry(w: MaintenanceWindow) -> dict:
    """A maintenance window as the file declares it (nodes and selector only when given: none is the cluster)."""
    return {"cluster": w.cluster.name, **({"nodes": list(w.nodes)} if w.nodes else {}),
            **({"selector": dict(w.selector)} if w.selector else {}), "start": w.start.isoformat(),
            "end": w.end.isoformat(), "reason": w.reason}


def calendar_sections(now=None) -> dict:
    """The live bookings and maintenance windows not over yet; a section without entries is left out."""
    now = now or timezone.now()
    out: dict = {}
    windows = [maintenance_entry(w) for w in MaintenanceWindow.objects.live().filter(end__gt=now)
               .select_related("cluster").order_by("start", "cluster__name", "reason", "id")]
    if windows:
        out["maintenance"] = windows
    bookings = [booking_entry(b) for b in Booking.objects.live().filter(end__gt=now)
                .select_related("department", "team", "cluster", "flavor").prefetch_related("users")
                .order_by("start", "department__slug", "cluster__name", "flavor__name", "purpose", "id")]
    if bookings:
        out["bookings"] = bookings
    return out


def _booking_key(b: Booking) -> tuple:
    return (b.department.slug, b.cluster.name, b.flavor.name, b.start, b.purpose)


def _window_key(w: MaintenanceWindow) -> tuple:
    return (w.cluster.name, w.start, w.reason)


class CalendarSections:
    """The ``maintenance:`` and ``bookings:`` steps of an apply (``self.run`` / ``self.fail`` are the
    applier's). With prune, the live windows the file leaves out that are not over yet are cancelled first
    (audited as cancellations, freeing their GPUs for what the file declares); then the windows, then the
    bookings, so a booking is checked against the maintenance the file declares."""

    def calendar(self):
        now = timezone.now()
        windows = {_window_key(w): w for w in MaintenanceWindow.objects.live().filter(end__gt=now)
                   .select_related("cluster")}
        bookings = {_booking_key(b): b for b in Booking.objects.live().filter(end__gt=now)
                    .select_related("department", "team", "cluster", "flavor").prefetch_related("users")}
        declared_w = [(i, w, calendar_key("maintenance window", w)) for i, w in
                      enumerate(self.data.get("maintenance") or [])]
        declared_b = [(i, b, calendar_key("booking", b)) for i, b in enumerate(self.data.get("bookings") or [])]
        if self.prune:
            keep_b = {k for _, _, k in declared_b}
            for key, b in sorted(bookings.items(), key=lambda kv: (kv[1].start, kv[1].pk)):
                if key not in keep_b:
                    self.run(("bookings",), "-", f"booking {b.department.slug} {b.gpus}x {b.flavor.name} "
                             f"({b.purpose}) from {b.start.isoformat()}", [],
                             lambda b=b: calendar.booking_cancel(booking=b, actor=self.actor, comment=PRUNED))
            keep_w = {k for _, _, k in declared_w}
            for key, w in sorted(windows.items(), key=lambda kv: (kv[1].start, kv[1].pk)):
                if key not in keep_w:
                    self.run(("maintenance",), "-", f"maintenance {w.cluster.name} ({w.reason}) from "
                             f"{w.start.isoformat()}", [],
                             lambda w=w: calendar.maintenance_cancel(window=w, actor=self.actor, comment=PRUNED))
        for i, w, key in declared_w:
            self._window(("maintenance", i), w, windows.get(key))
        for i, b, key in declared_b:
            self._booking(("bookings", i), b, bookings.get(key))

    def _window(self, path: tuple, w: dict, cur: MaintenanceWindow | None) -> None:
        cluster = Cluster.objects.filter(name=w["cluster"]).first()
        if cluster is None:
            return  # its cluster failed to be created: that error is reported already
        want = {"nodes": sorted(set(w.get("nodes") or [])), "selector": dict(w.get("selector") or {}),
                "end": w["end"]}
        what = f"maintenance {cluster.name} ({w['reason']}) from {w['start'].isoformat()}"
        if cur is None:
            self.run(path, "+", what, [f"until {w['end'].isoformat()}"] + (
                [f"nodes: {', '.join(want['nodes'])}"] if want["nodes"] else []),
                     lambda: calendar.maintenance_create(actor=self.actor, cluster=cluster, start=w["start"],
                                                         reason=w["reason"], **want))
            return
        old = {"nodes": list(cur.nodes or []), "selector": dict(cur.selector or {}), "end": cur.end}
        if old != want:
            changes = {k: v for k, v in want.items() if old[k] != v}
            self.run(path, "~", what, field_changes(old, want),
                     lambda: calendar.maintenance_update(window=cur, actor=self.actor, comment="lab file", **changes))

    def _booking(self, path: tuple, b: dict, cur: Booking | None) -> None:
        dept = Department.objects.filter(slug=b["department"]).first()
        cluster = Cluster.objects.filter(name=b["cluster"]).first()
        flavor = Flavor.objects.filter(name=b["flavor"]).first()
        if dept is None or cluster is None or flavor is None:
            return  # what it names failed to be created: that error is reported already
        want = {"gpus": b["gpus"], "end": b["end"], "users": sorted(set(b.get("users") or [])),
                "team": b.get("team")}
        what = f"booking {dept.slug} {flavor.name}@{cluster.name} ({b['purpose']}) from {b['start'].isoformat()}"
        if cur is None:
            self.run(path, "+", what, [f"{want['gpus']} GPUs", f"until {want['end'].isoformat()}"] + (
                [f"users: {', '.join(want['users'])}"] if want["users"] else []) + (
                [f"team: {want['team']}"] if want["team"] else []),
                     lambda: calendar.booking_create(actor=self.actor, department=dept, cluster=cluster, flavor=flavor,
                                                     start=b["start"], purpose=b["purpose"],
                                                     **{**want, "team": _team(dept, want["team"])}))
            return
        old = {"gpus": cur.gpus, "end": cur.end, "users": sorted(u.username for u in cur.users.all()),
               "team": cur.team.slug if cur.team_id else None}
        if old != want:
            changes = {k: v for k, v in want.items() if old[k] != v}

            def update():
                if "team" in changes:
                    changes["team"] = _team(dept, changes["team"])
                return calendar.booking_update(booking=cur, actor=self.actor, comment="lab file", **changes)

            self.run(path, "~", what, field_changes(old, want), update)
