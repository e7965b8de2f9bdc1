"""Template helpers for budgets: ``{% job_cost job as cost %}`` and ``{{ mcr|credits }}``."""

from __future__ import annotations

from django import template

from quotas.services import reports

register = template.Library()


@register.simple_tag
def job_cost(job):
    return reports.job_cost(job=job)


@register.filter
def credits(mcr) -> str:
    """1234567 mcr -> "1,234.567 cr" (exact: integer arithmetic)."""
    if mcr is None or mcr == "":
        return "—"
    mcr = int(mcr)
    sign = "-" if mcr < 0 else ""
    whole, frac = divmod(abs(mcr), 1000)
    return f"{sign}{whole:,}.{frac:03d} cr"
