"""gpup's calendar commands: ``bookings list|create|cancel``, ``maintenance list|create|cancel`` and
``calendar`` (docs/bookings.md). ``gpuportal.cli`` adds ``COMMANDS`` to ``gpup``.

Times on the command line are the terminal's local time unless they carry a zone (``Z``, ``+01:00``), the
way ``gpup`` prints them; they are sent to the portal with their offset, so it never guesses."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import click

from gpuportal.cli_base import USAGE, State, command, emit, fail, when

TIME_HELP = "e.g. 2026-12-08T09:00 (your local time) or 2026-12-08T09:00Z"


def _moment(value: str) -> datetime | None:
    """A time with its offset (the terminal's local zone when it carries none), or None when it is no time."""
    try:
        moment = datetime.fromisoformat(value.strip().replace(" ", "T", 1))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.astimezone()


def parse_time(option: str, value: str) -> str:
    """An option's time as ISO 8601 with its offset: local time when it carries none."""
    moment = _moment(value)
    if moment is None:
        fail(f"{option} {value!r} is not a time: {TIME_HELP}", USAGE)
    return moment.isoformat()


def parse_selector(items: tuple[str, ...]) -> dict[str, str] | None:
    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            fail(f"--selector {item!r}: use LABEL=VALUE, e.g. --selector rack=r1", USAGE)
        out[key] = value
    return out


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _owners(b: dict) -> str:
    if b.get("team"):
        return f"team {b['team']}"
    return ", ".join(b.get("users") or []) or "everyone"


def print_bookings(rows: list[dict]) -> None:
    if not rows:
        click.echo("no bookings")
        return
    _table(("ID", "DEPARTMENT", "FOR", "GPUS", "CLUSTER", "START", "END", "PURPOSE"),
           [(str(b["id"]), b["department"], _owners(b), f"{b['gpus']} {b['flavor']}", b["cluster"], when(b["start"]),
             when(b["end"]), b["purpose"] + (" (cancelled)" if b.get("cancelled") else "")) for b in rows])


def _where(w: dict) -> str:
    if w.get("affected_nodes") is not None and (w.get("nodes") or w.get("selector")):
        return ", ".join(w["affected_nodes"]) or "-"
    if w.get("nodes"):
        return ", ".join(w["nodes"])
    if w.get("selector"):
        return ",".join(f"{k}={v}" for k, v in w["selector"].items())
    return "whole cluster"


def print_windows(rows: list[dict]) -> None:
    if not rows:
        click.echo("no maintenance windows")
        return
    _table(("ID", "CLUSTER", "NODES", "START", "END", "REASON"),
           [(str(w["id"]), w["cluster"], _where(w), when(w["start"]), when(w["end"]),
             w["reason"] + (" (cancelled)" if w.get("cancelled_at") else "")) for w in rows])


def print_calendar(cal: dict) -> None:
    """The week in time order, bookings and windows together."""
    click.echo(f"calendar {when(cal['start'])} to {when(cal['end'])}")
    entries = [(e["start"], e["end"], 0, e["id"], e) for e in cal["bookings"]] + \
        [(w["start"], w["end"], 1, w["id"], w) for w in cal["maintenance"]]
    if not entries:
        click.echo("nothing booked, no maintenance")
        return
    rows = []
    for _, _, kind, _, e in sorted(entries, key=lambda t: (t[0], t[2], t[3])):
        if kind == 0:
            what = f"booking {e['id']}: {e['gpus']} {e['flavor']} on {e['cluster']}"
            who = f"{e['department']}, {e['purpose']}" + (f" ({_owners(e)})" if e.get("own") else "")
        else:
            what = f"maintenance {e['id']}: {e['cluster']} {_where(e)}"
            who = e["reason"]
        rows.append((when(e["start"]), when(e["end"]), what, who))
    _table(("START", "END", "WHAT", "FOR"), rows)


@click.group("bookings")
def bookings():
    """GPUs booked ahead for a department, one of its teams or some of its members (docs/bookings.md)."""


@bookings.command("list")
@command
def bookings_list(state: State):
    """Your department's bookings (every one for platform admins), the latest first."""
    emit(state, state.client().bookings(), print_bookings)


@bookings.command("create")
@click.option("--flavor", required=True, help="The GPU type, e.g. a100-80gb.")
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="How many GPUs.")
@click.option("--start", required=True, help=f"When the booking begins: {TIME_HELP}.")
@click.option("--end", help="When it ends (the same forms).")
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), help="Or how long it lasts.")
@click.option("--purpose", required=True, help="What it is for: its owners and the reasons read it.")
@click.option("--department", help="For this department (platform admins; default: your own).")
@click.option("--team", help="For this team of the department (team admins: their own team).")
@click.option("--user", "users", multiple=True, help="For this member only (repeatable).")
@click.option("--cluster", help="On this cluster (default: the default cluster).")
@command
def bookings_create(state: State, flavor, gpus, start, end, hours, purpose, department, team, users, cluster):
    """Book GPUs of a flavor for a time window."""
    if (end is None) == (hours is None):
        fail("give --end or --hours (one of them)", USAGE)
    if team and users:
        fail("a booking is for a team (--team) or for some members (--user), not both", USAGE)
    begin = parse_time("--start", start)
    finish = parse_time("--end", end) if end is not None else \
        (datetime.fromisoformat(begin) + timedelta(hours=hours)).isoformat()
    booking = state.client().booking_create(flavor=flavor, gpus=gpus, start=begin, end=finish, purpose=purpose,
                                            department=department, team=team, cluster=cluster,
                                            users=list(users) or None)
    emit(state, booking, lambda b: click.echo(
        f"booked {b['gpus']} {b['flavor']} on {b['cluster']} for {b['department']} ({_owners(b)}) from "
        f"{when(b['start'])} to {when(b['end'])}: booking {b['id']}"))


@bookings.command("cancel")
@click.argument("booking_id", type=click.IntRange(min=1))
@command
def bookings_cancel(state: State, booking_id):
    """Cancel a booking (your department's as its admin, any as a platform admin)."""
    state.client().booking_cancel(booking_id)
    emit(state, {"cancelled": booking_id}, lambda _: click.echo(f"cancelled booking {booking_id}"))


@click.group("maintenance")
def maintenance():
    """Maintenance windows: nodes out of service for a time (platform admins declare them)."""


@maintenance.command("list")
@command
def maintenance_list(state: State):
    """Every maintenance window, the latest first, with the nodes it takes."""
    emit(state, state.client().maintenance_windows(), print_windows)


@maintenance.command("create")
@click.option("--start", required=True, help=f"When the window begins: {TIME_HELP}.")
@click.option("--end", required=True, help="When it ends (the same forms).")
@click.option("--reason", required=True, help="Why: the affected jobs' owners read it.")
@click.option("--node", "nodes", multiple=True, help="A node by name (repeatable).")
@click.option("--selector", "selector", multiple=True, metavar="LABEL=VALUE",
              help="The nodes carrying this label (repeatable: every one), e.g. rack=r1.")
@click.option("--cluster", help="On this cluster (default: the default cluster); neither --node nor --selector: "
              "all of it.")
@command
def maintenance_create(state: State, start, end, reason, nodes, selector, cluster):
    """Declare a maintenance window: the engine drains its nodes in time (platform admins)."""
    window = state.client().maintenance_create(start=parse_time("--start", start), end=parse_time("--end", end),
                                               reason=reason, nodes=list(nodes) or None,
                                               selector=parse_selector(selector), cluster=cluster)
    emit(state, window, lambda w: click.echo(
        f"maintenance {w['id']} on {w['cluster']} ({_where(w)}) from {when(w['start'])} to {when(w['end'])}"))


@maintenance.command("cancel")
@click.argument("window_id", type=click.IntRange(min=1))
@command
def maintenance_cancel(state: State, window_id):
    """Cancel a maintenance window (platform admins)."""
    state.client().maintenance_cancel(window_id)
    emit(state, {"cancelled": window_id}, lambda _: click.echo(f"cancelled maintenance window {window_id}"))


@click.command("calendar")
@click.option("--start", help="The first day (2026-12-08) or time; default today (UTC).")
@click.option("--days", type=click.IntRange(1, 31), default=7, show_default=True)
@command
def calendar(state: State, start, days):
    """The bookings and maintenance windows of a week, as you may see them (another department's booking by
    its size only)."""
    if start is not None:
        try:
            start = date.fromisoformat(start.strip()).isoformat()
        except ValueError:
            moment = _moment(start)
            if moment is None:
                fail(f"--start {start!r} is not a date or a time: e.g. 2026-12-08 or 2026-12-08T09:00", USAGE)
            start = moment.isoformat()
    emit(state, state.client().calendar(start=start, days=days), print_calendar)


COMMANDS = [bookings, maintenance, calendar]
