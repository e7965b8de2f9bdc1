"""The calendar page (``/calendar/``): a week of bookings and maintenance windows, day by day, as
``GET /api/v1/calendar`` gives them to the reader (another department's bookings as GPUs booked by "another
department")."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from portal.errors import ValidationFailed
from portal.tenancy import member
from scheduling.selectors import calendar_entries, calendar_window


@login_required
def calendar(request):
    m = member(request.user)
    try:
        start, days = calendar_window(request.GET)
    except ValidationFailed:
        start, days = calendar_window({})
    entries = calendar_entries(request.user, start, start + timedelta(days=days))
    week = []
    for d in range(days):
        day, next_day = start + timedelta(days=d), start + timedelta(days=d + 1)
        rows = [e for e in (*entries["bookings"], *entries["maintenance"]) if e["start"] < next_day and e["end"] > day]
        week.append({"day": day, "entries": sorted(rows, key=lambda e: (e["start"], e["kind"], e["id"]))})
    return render(request, "scheduling/calendar.html", {
        "membership": m, "week": week, "start": start,
        "previous": (start - timedelta(days=7)).date().isoformat(), "next": (start + timedelta(days=7)).date().isoformat(),
    })
