"""Template helpers: ``{% job_observability job as obs %}`` (the job page's panel), ``{% my_recommendations
as recs %}`` (the submit form), and ``{{ usage|util_polyline }}`` (the chart's points)."""

from __future__ import annotations

from django import template

from observability import selectors
from observability.models import UsageHistory
from observability.services.rightsizing import recommendation_from
from portal.tenancy import VIEW

register = template.Library()

CHART_W, CHART_H = 480, 100


@register.simple_tag(takes_context=True)
def job_observability(context, job):
    return selectors.job_observability(user=context["request"].user, job=job)


@register.simple_tag(takes_context=True)
def my_recommendations(context, limit: int = 5):
    user = context["request"].user
    rows = UsageHistory.objects.restrict(user, VIEW).filter(owner=user, runs__gt=0, key__startswith="name:")
    return [recommendation_from(h) for h in rows.order_by("-updated_at")[:limit]]


def _points(series, index: int, top: float) -> str:
    """The chart's points: x from the first sample's time to the last one's (the series' times are Unix
    seconds), y from 0 to ``top``."""
    if not series or top <= 0:
        return ""
    start = series[0][0]
    span = max(series[-1][0] - start, 1)
    return " ".join(f"{(p[0] - start) / span * CHART_W:.1f},{CHART_H - min(p[index] or 0, top) / top * CHART_H:.1f}"
                    for p in series)


@register.filter
def util_polyline(usage) -> str:
    return _points(usage.series, 1, 100.0)


@register.filter
def memory_polyline(usage) -> str:
    return _points(usage.series, 2, usage.memory_total_mib or usage.peak_memory_mib or 0)


@register.filter
def span_minutes(usage) -> str:
    """How many minutes the attempt's series covers, from its first sample to its last."""
    series = usage.series or []
    return minutes(series[-1][0] - series[0][0] if series else 0)


@register.filter
def minutes(seconds) -> str:
    return f"{(seconds or 0) / 60:.0f}"
